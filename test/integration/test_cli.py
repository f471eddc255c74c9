"""Bad input to dadtrun: exit status >= 2, a one-line error, and no rank started."""
import subprocess

import pytest

from conftest import PY, worker_env

CASES = {
    "np-zero": ["-np", "0"],
    "np-negative": ["-np", "-2"],
    "np-not-a-number": ["-np", "two"],
    "unknown-flag": ["--no-such-flag", "-np", "1"],
    "np-over-host-slots": ["-np", "3", "-H", "localhost:2"],
    "bad-fusion-threshold": ["-np", "1", "--fusion-threshold-mb", "lots"],
    "bad-cycle-time": ["-np", "1", "--cycle-time-ms", "-1"],
    "flag-missing-value": ["-np"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(dadtrun, tmp_path, case):
    flag_file = tmp_path / "started"
    cmd = [dadtrun, *CASES[case]]
    if case != "flag-missing-value":
        cmd += [PY, "-c", f"open({str(flag_file)!r}, 'w').close()"]
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode >= 2, f"exit status {proc.returncode}\n{proc.stderr}"
    assert len(lines) == 1, f"expected a one-line error, got {len(lines)} lines:\n{proc.stderr}"
    assert not flag_file.exists(), "dadtrun started the command despite bad input"


def test_missing_command(dadtrun):
    proc = subprocess.run([dadtrun, "-np", "2"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode >= 2
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr


def test_command_not_found(dadtrun):
    proc = subprocess.run([dadtrun, "-np", "2", "/nonexistent/dadt-no-such-program"], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "dadt-no-such-program" in proc.stderr, proc.stderr


def test_help_and_version(dadtrun):
    h = subprocess.run([dadtrun, "--help"], capture_output=True, text=True, timeout=30)
    v = subprocess.run([dadtrun, "--version"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and "-np" in h.stdout
    assert v.returncode == 0 and v.stdout.strip()
