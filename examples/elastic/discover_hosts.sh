#!/bin/sh
# A host discovery script for dadtrun's elastic mode (docs/elastic.md, "Writing a discovery script"):
# prints the hosts listed in a file, one `host` or `host:slots` per line, skipping blank lines and
# `#` comments. Edit the file while the job runs to add or drop hosts:
#
#   echo "h1:2
#   h2:2" > pool.txt
#   dadtrun -np 2 --min-np 2 --max-np 8 --network-interface eth0 \
#       --host-discovery-script "sh examples/elastic/discover_hosts.sh pool.txt" python train.py
#
# Replace the file in one step (write a temporary file, then `mv` it over the old one): a reader
# must never see it half written. The file is named by the first argument, else $DADT_HOSTS_FILE.
# A missing file is an error (exit 1, with a message): on the first run that ends the launch, later
# the driver logs it and keeps the last good list.
set -u
file=${1:-${DADT_HOSTS_FILE:-}}
if [ -z "$file" ]; then
    echo "discover_hosts.sh: no hosts file (give it as the first argument or in DADT_HOSTS_FILE)" >&2
    exit 1
fi
if [ ! -r "$file" ]; then
    echo "discover_hosts.sh: cannot read hosts file $file" >&2
    exit 1
fi
# Strip comments and surrounding blanks; print what is left.
sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$file"
