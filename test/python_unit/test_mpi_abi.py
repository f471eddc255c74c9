"""dadt._mpi_abi: which dadt._core build a process imports, and which MPICH-ABI library it loads first.
The launches themselves (MPICH's mpiexec, Intel MPI's mpirun, the mismatches) are
test/integration/test_mpich.py; the C++ half of the launcher rule is env_test.cc (DetectMpiLauncher)."""
import os

import pytest

from dadt import _mpi_abi

HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "PMI_FD": "6"}


def test_launcher_follows_the_cpp_rule():
    assert _mpi_abi.launcher({}) == ""
    assert _mpi_abi.launcher(HYDRA) == "hydra"
    assert _mpi_abi.launcher({"PMI_RANK": "0", "PMI_SIZE": "2"}) == ""  # srun --mpi=pmi2
    assert _mpi_abi.launcher(dict(HYDRA, OMPI_COMM_WORLD_SIZE="2")) == "openmpi"
    assert _mpi_abi.launcher({"OMPI_COMM_WORLD_SIZE": ""}) == ""


def test_wanted_abi():
    assert _mpi_abi.wanted_abi({}) == "openmpi"
    assert _mpi_abi.wanted_abi(HYDRA) == "mpich"
    assert _mpi_abi.wanted_abi(dict(HYDRA, DADT_RANK="1")) == "openmpi"  # dadtrun's ranks
    assert _mpi_abi.wanted_abi(dict(HYDRA, DADT_MPI_ABI="openmpi")) == "openmpi"
    assert _mpi_abi.wanted_abi({"DADT_MPI_ABI": "MPICH"}) == "mpich"
    with pytest.raises(ImportError, match="DADT_MPI_ABI=intel: expected openmpi .* or mpich"):
        _mpi_abi.wanted_abi({"DADT_MPI_ABI": "intel"})


def test_candidates_in_order(monkeypatch):
    monkeypatch.setattr(_mpi_abi, "_ancestor_executables", lambda: ["/usr/bin/python3", "/usr/bin/hydra_pmi_proxy"])
    assert _mpi_abi.candidates({"DADT_MPI_LIBRARY": "/x/libmpi.so.12", "I_MPI_ROOT": "/i"}) == ["/x/libmpi.so.12"]
    # /usr/bin/../lib/libmpi.so.12 does not exist: Debian's Hydra adds nothing.
    assert _mpi_abi.candidates({"I_MPI_ROOT": "/i"}) == [
        "/i/lib/libmpi.so.12", "/i/lib/release/libmpi.so.12", "libmpi.so.12", "libmpich.so.12"]


def test_the_library_beside_the_launcher(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmpi.so.12").write_bytes(b"")
    proxy = str(tmp_path / "bin" / "hydra_pmi_proxy")
    monkeypatch.setattr(_mpi_abi, "_ancestor_executables", lambda: ["/bin/sh", proxy])
    assert _mpi_abi.candidates({}) == [str(tmp_path / "lib" / "libmpi.so.12"), "libmpi.so.12", "libmpich.so.12"]


def test_ancestors_are_read_from_proc():
    exes = _mpi_abi._ancestor_executables()
    assert exes and all(os.path.isabs(e) for e in exes)


def test_select_changes_nothing_outside_hydra():
    path = ["/pkg/dadt"]
    _mpi_abi.select(path, env={})
    assert path == ["/pkg/dadt"]


def test_no_library_is_an_import_error_naming_what_was_tried(monkeypatch):
    env = dict(HYDRA, DADT_MPI_LIBRARY="/nonexistent/libmpi.so.12")
    with pytest.raises(ImportError) as e:
        _mpi_abi.load_mpich_library(env)
    msg = str(e.value)
    assert "PMI_RANK=1, PMI_SIZE=2" in msg and "/nonexistent/libmpi.so.12" in msg
    assert "apt-get install libmpich12" in msg and "DADT_MPI_LIBRARY=" in msg
