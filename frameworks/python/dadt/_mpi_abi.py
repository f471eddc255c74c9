"""Which build of ``dadt._core`` this process imports: Open MPI's, or the MPICH ABI's.

Open MPI and the MPICH ABI (``libmpi.so.12``: MPICH, Intel MPI, MVAPICH) are not binary compatible
(Open MPI's handles are pointers, MPICH's ints), so dadt's MPI engine is built once for each
(docs/architecture.md, "One install, two MPI ABIs"): ``dadt/_core.so`` links Open MPI's
``libmpi.so.40``; ``dadt/_mpich/_core.so`` is the same module over the MPICH-ABI engine and links no
libmpi at all. ``import dadt`` calls :func:`select` before anything can import ``dadt._core``:

* under a Hydra launcher (MPICH's or Intel MPI's ``mpiexec``/``mpirun``: ``PMI_SIZE`` and
  ``MPI_LOCALNRANKS`` set, ``OMPI_COMM_WORLD_SIZE`` not), or with ``DADT_MPI_ABI=mpich``, it loads an
  MPICH-ABI ``libmpi.so.12`` with ``RTLD_GLOBAL`` and puts ``dadt/_mpich`` first on the package's
  path, so that ``import dadt._core`` finds the MPICH-ABI build, bound to that library;
* everywhere else (Open MPI's mpirun, dadtrun, a plain ``python``), or with ``DADT_MPI_ABI=openmpi``,
  nothing changes and ``dadt/_core.so`` is imported.

The launcher rule is the C++ one (runtime/common/env.h, ``DetectMpiLauncher``), repeated here only
because the choice has to be made before any C++ is loaded; the MPI engine checks the launcher
against its own ABI again before ``MPI_Init`` and refuses a mismatch with an error naming both.

The MPICH-ABI library, the first of these that loads:

1. ``DADT_MPI_LIBRARY`` (a path), when set; nothing else is tried then;
2. ``$I_MPI_ROOT/lib/libmpi.so.12`` (and ``lib/release/``): Intel MPI's ``vars.sh`` sets I_MPI_ROOT;
3. the library of the launcher that started this process: ``<dir>/../lib/libmpi.so.12`` beside the
   ``hydra_pmi_proxy`` among this process's ancestors (Intel MPI's runtime from PyPI, ``impi-rt``;
   an MPICH built from source);
4. ``libmpi.so.12`` as the dynamic loader finds it (``LD_LIBRARY_PATH``, ldconfig's cache);
5. ``libmpich.so.12``: Debian's and Ubuntu's MPICH (``apt-get install libmpich12``).

When none loads, or this install has no MPICH-ABI build, ``import dadt`` raises ImportError saying
what was found and what to do, on every rank (no rank waits for another here).
"""

import os
import sys
from typing import List, Optional, Tuple

ABI_VARIABLE = "DADT_MPI_ABI"          # openmpi | mpich; unset: from the launcher
LIBRARY_VARIABLE = "DADT_MPI_LIBRARY"  # the MPICH-ABI libmpi to load

# What select() did: ("openmpi", None, None) or ("mpich", library path, MPI_Get_library_version).
chosen: Tuple[str, Optional[str], Optional[str]] = ("openmpi", None, None)


def launcher(env=os.environ) -> str:
    """"openmpi", "hydra" or "" (runtime/common/env.h, DetectMpiLauncher)."""
    if env.get("OMPI_COMM_WORLD_SIZE"):
        return "openmpi"
    if env.get("PMI_SIZE") and env.get("MPI_LOCALNRANKS"):
        return "hydra"
    return ""


def wanted_abi(env=os.environ) -> str:
    """"mpich" or "openmpi": DADT_MPI_ABI when set, else the launcher's ABI. dadtrun's ranks
    (DADT_RANK set) keep Open MPI's build: dadtrun --mpi drives Open MPI's mpirun."""
    abi = env.get(ABI_VARIABLE, "").strip().lower()
    if abi:
        if abi not in ("openmpi", "mpich"):
            raise ImportError("%s=%s: expected openmpi (Open MPI, libmpi.so.40) or mpich (the MPICH "
                              "ABI, libmpi.so.12: MPICH, Intel MPI)" % (ABI_VARIABLE, env[ABI_VARIABLE]))
        return abi
    if "DADT_RANK" not in env and launcher(env) == "hydra":
        return "mpich"
    return "openmpi"


def _ancestor_executables(limit: int = 8) -> List[str]:
    """The executables of this process's parent, grandparent, ... (Linux /proc; [] elsewhere)."""
    out, pid = [], os.getppid()
    for _ in range(limit):
        if pid <= 1:
            break
        try:
            out.append(os.readlink("/proc/%d/exe" % pid))
            with open("/proc/%d/stat" % pid) as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # field 4, after "(comm)"
        except (OSError, ValueError, IndexError):
            break
    return out


def candidates(env=os.environ) -> List[str]:
    """The MPICH-ABI libraries to try, in order (see the module docstring)."""
    if env.get(LIBRARY_VARIABLE):
        return [env[LIBRARY_VARIABLE]]
    out = []
    root = env.get("I_MPI_ROOT")
    if root:
        out += [os.path.join(root, "lib", "libmpi.so.12"), os.path.join(root, "lib", "release", "libmpi.so.12")]
    for exe in _ancestor_executables():
        if os.path.basename(exe) == "hydra_pmi_proxy":
            lib = os.path.join(os.path.dirname(os.path.dirname(exe)), "lib", "libmpi.so.12")
            if os.path.exists(lib):
                out.append(lib)
            break
    out += ["libmpi.so.12", "libmpich.so.12"]
    return out


def _library_version(lib) -> str:
    import ctypes
    buf = ctypes.create_string_buffer(8192)  # >= MPI_MAX_LIBRARY_VERSION_STRING of every MPI
    n = ctypes.c_int(0)
    lib.MPI_Get_library_version(buf, ctypes.byref(n))
    return buf.value.decode(errors="replace").strip().splitlines()[0] if buf.value else "?"


def load_mpich_library(env=os.environ) -> Tuple[str, str]:
    """Loads the first MPICH-ABI libmpi that loads, RTLD_GLOBAL; returns (path, version)."""
    import ctypes
    tried = []
    for name in candidates(env):
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
            continue
        version = _library_version(lib)
        if "Open MPI" in version:
            raise ImportError("%s is Open MPI (%s), not an MPICH-ABI library; set %s to an MPICH or "
                              "Intel MPI libmpi.so.12" % (name, version, LIBRARY_VARIABLE))
        return name, version
    raise ImportError(
        "dadt needs an MPICH-ABI MPI library (libmpi.so.12) here (%s), and none loaded; tried: %s. "
        "Install one (Debian/Ubuntu: apt-get install libmpich12; Intel MPI: source its vars.sh, or "
        "pip install impi-rt and use its mpirun), or set %s=/path/to/libmpi.so.12"
        % (_why(env), "; ".join(tried), LIBRARY_VARIABLE))


def _why(env) -> str:
    if env.get(ABI_VARIABLE):
        return "%s=%s" % (ABI_VARIABLE, env[ABI_VARIABLE])
    return ("this process was started by a Hydra launcher, MPICH's or Intel MPI's mpiexec/mpirun: "
            "PMI_RANK=%s, PMI_SIZE=%s" % (env.get("PMI_RANK", "?"), env.get("PMI_SIZE", "?")))


def select(package_path: List[str], env=os.environ) -> None:
    """Points ``import dadt._core`` at the build for this process's MPI (see the module docstring);
    ``package_path`` is the dadt package's ``__path__``, changed in place."""
    global chosen
    if wanted_abi(env) != "mpich" or "dadt._core" in sys.modules:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    variant = os.path.join(here, "_mpich")
    if not any(f.startswith("_core.") and f.endswith(".so") for f in _listdir(variant)):
        raise ImportError(
            "dadt needs its MPICH-ABI build here (%s), and this install has none (%s/_core.so is "
            "missing): reinstall dadt with `pip install .` on a machine with MPICH's headers "
            "(Debian: apt-get install libmpich-dev), or launch with Open MPI's mpirun or dadtrun"
            % (_why(env), variant))
    path, version = load_mpich_library(env)
    package_path.insert(0, variant)
    chosen = ("mpich", path, version)


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
