#!/usr/bin/env bash
# Creates (or refreshes) the virtualenv that dadt.mxnet is tested in, and prints its python.
#
#   tools/mxnet_venv.sh                 # build/mxnet-venv; prints build/mxnet-venv/bin/python
#   MXNET_VENV=/path tools/mxnet_venv.sh
#
# Why a virtualenv of its own: MXNet 1.9.1, its last release, needs NumPy < 1.24 (it uses the
# `np.bool` alias that NumPy 1.24 removed), and the main interpreter has NumPy 2 for torch,
# TensorFlow and JAX. The venv is a clean one (no --system-site-packages) with the pins below.
#
# dadt goes into it without Bazel: the Python sources of this working tree
# (frameworks/python/dadt) plus the compiled modules (dadt/_core.so, dadt/_mpich/_core.so) of the
# dadt installed into $PYTHON by `make install`, the build that matches the dadtrun on PATH. A
# Bazel build for the venv's python would change --repo_env=PYTHON_BIN_PATH and so rebuild the
# extension for every other user of the Bazel cache. Both interpreters are the same CPython, so
# the module loads in either. Sources are copied again at every run (a second), so the venv
# always tests the working tree; packages are installed only when the pins change.
#
# Environment:
#   PYTHON        the interpreter dadt is installed in and the venv is made from (default python3)
#   MXNET_VENV    where the venv goes (default <repo>/build/mxnet-venv)
# Cost: about 20 s on a warm pip cache (~120 MB of wheels: mxnet 49 MB, scipy 36 MB, numpy 17 MB,
# scikit-learn 11 MB); a cold cache downloads them first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${MXNET_VENV:-$ROOT/build/mxnet-venv}"
# numpy < 1.24 for MXNet; scipy and scikit-learn (the digits data set) are the last releases
# built against NumPy 1.x that install on it with cp311 wheels.
PINS="mxnet==1.9.1 numpy==1.23.5 scipy==1.11.4 scikit-learn==1.3.2 pytest==8.3.5"

log() { echo "[mxnet_venv] $*" >&2; }

# The compiled modules of the installed dadt, found without importing it (nothing to initialise).
CORE_DIR="$("$PYTHON" - <<'EOF'
import importlib.util, os, sys
spec = importlib.util.find_spec("dadt")
if spec is None or not spec.submodule_search_locations:
    sys.exit("dadt is not installed into %s: run `make install` first" % sys.executable)
path = list(spec.submodule_search_locations)[0]
if not os.path.isfile(os.path.join(path, "_core.so")):
    sys.exit("%s has no _core.so: run `make install` first" % path)
print(path)
EOF
)"
PY_VERSION="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.dadt-pins" 2>/dev/null)" != "$PY_VERSION $PINS" ]; then
    log "creating $VENV (python $PY_VERSION): $PINS"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    # shellcheck disable=SC2086 # PINS is a word list on purpose
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check $PINS
    echo "$PY_VERSION $PINS" >"$VENV/.dadt-pins"
fi

SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DEST="$SITE/dadt"
rm -rf "$DEST"
mkdir -p "$DEST"
(cd "$ROOT/frameworks/python/dadt" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - .) | (cd "$DEST" && tar -xf -)
cp "$CORE_DIR/_core.so" "$DEST/_core.so"
if [ -f "$CORE_DIR/_mpich/_core.so" ]; then
    mkdir -p "$DEST/_mpich"
    cp "$CORE_DIR/_mpich/_core.so" "$DEST/_mpich/_core.so"
fi
chmod u+w -R "$DEST"

# The check that matters: mxnet and dadt.mxnet import side by side, numpy is the pinned one.
(cd / && "$VENV/bin/python" -c '
import mxnet, numpy, dadt.mxnet, dadt._core
assert numpy.__version__.startswith("1.23"), numpy.__version__
print("mxnet", mxnet.__version__, "numpy", numpy.__version__, "dadt from", dadt.__file__)
' >&2)
echo "$VENV/bin/python"
