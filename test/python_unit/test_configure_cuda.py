"""tools/configure_cuda.py: when the CUDA/NCCL build is turned on, and what it writes.

Runs on fake toolkit trees, so it needs no CUDA; the last test checks this machine's real answer
against what the installed dadt was built with.
"""
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import configure_cuda  # noqa: E402


def touch(path, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("")
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


@pytest.fixture
def toolkit(tmp_path):
    cuda = tmp_path / "cuda"
    touch(str(cuda / "bin" / "nvcc"), executable=True)
    touch(str(cuda / "include" / "cuda_runtime.h"))
    touch(str(cuda / "lib64" / "libcudart_static.a"))
    nccl = tmp_path / "nccl"
    touch(str(nccl / "include" / "nccl.h"))
    touch(str(nccl / "lib" / "libnccl.so.2"))
    env = {"CUDA_HOME": str(cuda), "DADT_NCCL_HOME": str(nccl), "PATH": "/nonexistent"}
    return cuda, nccl, env


def test_everything_found_turns_the_cuda_config_on(toolkit):
    cuda, nccl, env = toolkit
    text, summary, err = configure_cuda.detect(sys.executable, env)
    assert err is None
    assert "build:cuda --define=dadt_cuda=1" in text
    assert "build:cuda --repo_env=DADT_CUDA_HOME=%s\n" % os.path.realpath(str(cuda)) in text
    assert "build:cuda --repo_env=DADT_NCCL_HOME=%s\n" % os.path.realpath(str(nccl)) in text
    assert "--repo_env=DADT_NVCC=%s" % os.path.realpath(str(cuda / "bin" / "nvcc")) in text
    assert text.rstrip().endswith("build --config=cuda")
    assert summary.startswith("CUDA/NCCL: on")


def test_missing_nccl_gives_the_cpu_build_and_says_why(toolkit, tmp_path):
    _, nccl, env = toolkit
    os.remove(str(nccl / "include" / "nccl.h"))
    env["DADT_NCCL_HOME"] = str(nccl)
    text, summary, err = configure_cuda.detect(sys.executable, dict(env, DADT_NVCC="", PYTHON="x"))
    if "CUDA/NCCL: on" in summary:  # the interpreter running the test has the NCCL wheel
        assert "nvidia/nccl" in text
        return
    assert "--config=cuda" not in text and err is None
    assert "NCCL" in summary and "not found" in summary


def test_missing_nvcc_is_an_error_only_when_cuda_is_demanded(toolkit, monkeypatch):
    cuda, _, env = toolkit
    os.remove(str(cuda / "bin" / "nvcc"))
    monkeypatch.setattr(configure_cuda, "DEFAULT_CUDA_ROOTS", [])
    assert configure_cuda.find_nvcc(env) is None
    text, summary, err = configure_cuda.detect(sys.executable, env)
    assert "--config=cuda" not in text and err is None and "nvcc" in summary
    _, _, err = configure_cuda.detect(sys.executable, dict(env, DADT_CUDA="1"))
    assert err and "DADT_CUDA=1" in err and "nvcc" in err


def test_dadt_cuda_0_disables_it(toolkit):
    _, _, env = toolkit
    text, summary, _ = configure_cuda.detect(sys.executable, dict(env, DADT_CUDA="0"))
    assert "--config=cuda" not in text and "disabled" in summary


def test_configure_writes_the_fragment_only_when_it_changes(toolkit, tmp_path):
    _, _, env = toolkit
    path = str(tmp_path / "frag")
    configure_cuda.configure(sys.executable, path, env)
    first = os.stat(path).st_mtime_ns
    with open(path) as f:
        assert "build --config=cuda" in f.read()
    os.utime(path, ns=(first - 10**9, first - 10**9))
    configure_cuda.configure(sys.executable, path, env)
    assert os.stat(path).st_mtime_ns == first - 10**9  # untouched: Bazel's server keeps its state


def test_the_installed_dadt_matches_what_this_machine_offers():
    """nccl_built() is true exactly when configure finds nvcc, the CUDA headers and NCCL here."""
    try:
        import dadt._core as core
    except ImportError:
        pytest.skip("dadt is not installed into this interpreter")
    if os.environ.get("DADT_CUDA") == "0":
        pytest.skip("DADT_CUDA=0: the CUDA build was turned off on purpose")
    _, summary, _ = configure_cuda.detect(sys.executable)
    assert ("nccl" in core.built_backends()) == summary.startswith("CUDA/NCCL: on"), summary
