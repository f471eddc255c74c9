"""Helpers for the integration tier: tests that start dadtrun themselves (plain `pytest test/integration`).

The launcher is found as $DADTRUN, then `dadtrun` on PATH, then the Bazel outputs under the repository
root (bazel-bin/dadtrun/dadtrun). Workers import the installed dadt; when the source tree holds a built
extension (frameworks/python/dadt/_core*.so), frameworks/python is put first on PYTHONPATH instead.

Every job gets a unique marker as its first script argument, so that `pgrep -f MARKER` finds every
process of that job and nothing else; the `job` fixture asserts in the tests and cleans up after them.
"""
import functools
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable


def find_dadtrun():
    candidates = [os.environ.get("DADTRUN"), shutil.which("dadtrun"),
                  os.path.join(REPO, "bazel-bin", "dadtrun", "dadtrun")]
    candidates += sorted(glob.glob(os.path.join(REPO, "bazel-out", "*", "bin", "dadtrun", "dadtrun")))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("DADT_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                        "MASTER_ADDR", "MASTER_PORT")}


def _imports_dadt(env):
    probe = subprocess.run([PY, "-c", "import dadt._core"], env=env, cwd="/", capture_output=True, timeout=60)
    return probe.returncode == 0


@functools.lru_cache(maxsize=None)
def _pythonpath():
    """PYTHONPATH for the workers: as given when it (or the install) provides dadt._core, else the source tree."""
    env = _clean_env()
    current = env.get("PYTHONPATH")
    if _imports_dadt(env):
        return current
    src = os.path.join(REPO, "frameworks", "python")
    with_src = src + (os.pathsep + current if current else "")
    if _imports_dadt(dict(env, PYTHONPATH=with_src)):
        return with_src
    return current  # the scripts will fail to import dadt and say so


def worker_env(**extra):
    env = _clean_env()
    path = _pythonpath()
    if path:
        env["PYTHONPATH"] = path
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def dadtrun():
    path = find_dadtrun()
    if path is None:
        pytest.fail("dadtrun not found: set DADTRUN, install dadt (make install) or `bazel build //dadtrun`")
    return path


def pids_matching(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out if int(p) != os.getpid()]


def wait_no_process(marker, seconds=5.0):
    """Returns the pids still alive after `seconds` (empty list: the job is gone)."""
    deadline = time.monotonic() + seconds
    pids = pids_matching(marker)
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = pids_matching(marker)
    return pids


STDOUT_LINE = re.compile(r"^\[(\d+)\]<stdout>:(.*)$")


def rank_lines(stdout, rank=None, stream="stdout"):
    """The payloads of the lines a rank printed, in order."""
    # dadtrun's "[rank]<stdout>:" or, under --mpi, mpirun's --tag-output "[jobid,rank]<stdout>:".
    pattern = re.compile(r"^\[(?:\d+,)?(\d+)\]<%s>:(.*)$" % stream)
    out = []
    for line in stdout.splitlines():
        m = pattern.match(line)
        if m and (rank is None or int(m.group(1)) == rank):
            out.append(m.group(2))
    return out


def assert_digits_run(proc, epochs):
    """A train_digits.py launch: exit 0, `epochs` well-formed epoch lines and a final test accuracy
    >= 0.90 on rank 0 (its last line), nothing printed by rank 1. Returns that accuracy."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = rank_lines(proc.stdout, rank=0)
    assert lines, proc.stdout[-2000:]
    got = [ln for ln in lines if ln.startswith("epoch ")]
    assert len(got) == epochs, f"expected {epochs} epoch lines, got {len(got)}: {proc.stdout[-2000:]}"
    for ln in got:
        assert re.fullmatch(r"epoch \d+ loss \d+\.\d{4} accuracy [01]\.\d{4}", ln), ln
    m = re.fullmatch(r"final test accuracy: ([01]\.\d{4})", lines[-1])
    assert m, f"last line of rank 0: {lines[-1]!r}"
    assert float(m.group(1)) >= 0.90, lines[-1]
    assert rank_lines(proc.stdout, rank=1) == [], "only rank 0 prints"
    return float(m.group(1))


class Job:
    """One dadtrun launch of a script written by the test."""

    def __init__(self, dadtrun, tmp_path):
        self.dadtrun = dadtrun
        self.tmp_path = tmp_path
        self.marker = "dadt-it-" + uuid.uuid4().hex[:12]
        self.proc = None

    def command(self, script_text, np=2, flags=(), args=()):
        script = self.tmp_path / "job_script.py"
        script.write_text(script_text)
        return [self.dadtrun, "--gloo", "-np", str(np), *flags, PY, str(script), self.marker, *map(str, args)]

    def run(self, script_text, np=2, flags=(), args=(), timeout=120):
        """Runs to completion; returns (CompletedProcess, seconds)."""
        start = time.monotonic()
        try:
            proc = subprocess.run(self.command(script_text, np, flags, args), env=worker_env(), capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            pytest.fail(f"dadtrun still running after {timeout} s (killed)\nstdout:\n{out[-2000:]}\n"
                        f"stderr:\n{err[-2000:]}", pytrace=False)
        return proc, time.monotonic() - start

    def start(self, script_text, np=2, flags=(), args=()):
        """Starts dadtrun in its own session (signals sent to it never reach pytest)."""
        self.proc = subprocess.Popen(self.command(script_text, np, flags, args), env=worker_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self.proc

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in pids_matching(self.marker):  # only processes of this job (they carry the marker)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def job(dadtrun, tmp_path):
    j = Job(dadtrun, tmp_path)
    yield j
    j.cleanup()
