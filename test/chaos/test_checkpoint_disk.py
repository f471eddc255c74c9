"""The elastic checkpoint's filesystem fills up, or turns read-only, mid-training (docs/elastic.md,
"When every host is replaced"). The filesystem is a small tmpfs mounted on rank 0's host, h3: in the
mount namespace of h3's sshd, where the ranks of h3 live (tools/netns_hosts.sh gives each host its own).
Expected: the job ends with an error naming the checkpoint's path and the cause on every rank, and the
file on disk is still the last commit rank 0 reported, whole. The job ends at once, with exit code
86: the checkpoint's filesystem is the job's, so no other host would do better, and the workers exit
with the code on which dadtrun's elastic driver stops (not blacklisting host after host until
--elastic-timeout, kept long here to show it).
"""
import contextlib
import os
import re
import subprocess
import time

import pytest

from test_lost_launcher import committed, discovery_flags, read_checkpoint

from conftest import REPO

STATE = "/run/dadt-netns"
ELASTIC_TIMEOUT_S = 120  # long: the job must end on the fault, not on this
CAUSE = {"full": "No space left on device", "readonly": "Read-only file system"}


def _sshd_pid(host):
    with open(os.path.join(STATE, f"sshd_{host}.pid")) as f:
        return int(f.read().strip())


def _in_mount_ns(pid, *cmd):
    proc = subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", *cmd], capture_output=True, text=True,
                          timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"nsenter (mount namespace of {pid}) {' '.join(cmd)}: {proc.stderr.strip()}")


@contextlib.contextmanager
def small_tmpfs_on(host, directory, size="256k"):
    """A tmpfs of `size` on `directory`, seen by the host's processes only; yields the path to reach it
    from here (through /proc/PID/root). Unmounted in a finally."""
    pid = _sshd_pid(host)
    _in_mount_ns(pid, "mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "dadt-chaos", str(directory))
    try:
        yield pid, f"/proc/{pid}/root{directory}"
    finally:
        try:
            _in_mount_ns(pid, "umount", str(directory))
        except RuntimeError:
            _in_mount_ns(pid, "umount", "-l", str(directory))


def _fill(path):
    """Writes zeros to `path` until the filesystem is full."""
    block = b"\0" * 4096
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError:
            pass


@pytest.mark.timeout(150)
@pytest.mark.parametrize("fault", ["full", "readonly"])
def test_checkpoint_filesystem_fault(job, tmp_path, fault, repeat):
    directory = tmp_path / "ckptfs"
    directory.mkdir()
    ckpt = directory / "job.ckpt"
    script = os.path.join(REPO, "test", "chaos", "elastic_committer.py")
    with small_tmpfs_on("h3", directory) as (pid, seen_from_here):
        job.start(script, args=("--steps", "100000", "--commit-every", "5"),
                  flags=(*discovery_flags(ckpt), "--elastic-timeout", str(ELASTIC_TIMEOUT_S)), hosts_spec=None)
        job.wait_line(r"<stdout>:COMMITTED 15 ", timeout=90)
        if fault == "full":
            _fill(os.path.join(seen_from_here, "filler"))
        else:
            _in_mount_ns(pid, "mount", "-o", "remount,ro", str(directory))
        broken = time.monotonic()
        rc = job.wait(ELASTIC_TIMEOUT_S + 60)
        took = time.monotonic() - broken
        seq, step, digest = read_checkpoint(os.path.join(seen_from_here, "job.ckpt"))
    seen = committed(job)
    print(f"{fault}: dadtrun exited {rc} {took:.1f} s after the fault; last commit seen {seen[-1]}, "
          f"on disk: commit {seq}, step {step}; dadtrun's lines: {[ln for ln in job.stderr.splitlines() if ln.startswith('dadtrun')][-4:]}")
    assert rc == 86, job.dump()
    assert took < 30, f"the job took {took:.1f} s to end after the fault"
    message = f"cannot write the elastic checkpoint {ckpt}: [Errno {28 if fault == 'full' else 30}] {CAUSE[fault]}"
    raised_on = {m.group(1) for _, ln in job.err_lines
                 for m in [re.match(r"^\[(h\d)/[^\]]*\]<stderr>:.*ElasticCheckpointError: (.*)$", ln)] if m
                 and message in ln}
    assert raised_on == {"h3", "h4"}, f"expected ElasticCheckpointError '{message}' on both hosts:\n{job.dump()}"
    assert (step, digest) == seen[-1][1:], f"the checkpoint holds step {step}, the last commit was {seen[-1]}"
    assert seq == step // 5
