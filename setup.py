"""Build glue for `pip install .`: the C++ parts come from Bazel, the Python package from frameworks/python.

Static metadata lives in pyproject.toml. What this file adds:
  * dadt._core: built by `bazel build //frameworks/bindings:_core.so` and installed as dadt/_core.so,
    and its MPICH-ABI twin (//frameworks/bindings:_mpich/_core.so) as dadt/_mpich/_core.so;
  * dadtrun: the C++ launcher (//dadtrun:dadtrun), installed as a data file into <prefix>/bin, the
    directory that also receives console scripts (venv/bin, /usr/local/bin, ~/.local/bin with --user),
    executable bit kept.
Bazel flags and target paths are shared with the Makefile through tools/bazel_build.py.
"""

import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bazel_build  # noqa: E402  (tools/bazel_build.py)

# Relative to ROOT, as setuptools wants data_files sources; build/ is git-ignored.
STAGED_DADTRUN = os.path.join("build", "dadt-bin", "dadtrun")


def _copy_executable(src, dst):
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)  # Bazel outputs are read-only; a previous copy may be too
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o755)


class BuildPy(build_py):
    """Start from an empty build/lib/dadt so modules deleted from the source do not linger in wheels
    (pip 23 builds in-tree and reuses build/)."""

    def run(self):
        stale = os.path.join(self.build_lib, "dadt")
        if os.path.isdir(stale):
            shutil.rmtree(stale)
        super().run()


class BazelBuildExt(build_ext):
    """Builds dadt._core and dadtrun with Bazel instead of compiling sources itself."""

    def get_ext_filename(self, fullname):
        # The Bazel target is _core.so; Python imports a plain .so as well as the ABI-tagged name.
        return os.path.join(*fullname.split(".")) + ".so"

    def run(self):
        try:
            outputs = bazel_build.build(root=ROOT, python=sys.executable)
        except bazel_build.BazelError as e:
            sys.exit("dadt: Bazel build failed: %s" % e)
        modules = {"dadt._core": bazel_build.CORE_MODULE, "dadt._mpich._core": bazel_build.CORE_MODULE_MPICH}
        for ext in self.extensions:
            _copy_executable(outputs[modules[ext.name]], self.get_ext_fullpath(ext.name))
        _copy_executable(outputs[bazel_build.DADTRUN], os.path.join(ROOT, STAGED_DADTRUN))


setup(
    # dadt._mpich._core: the same module over the MPICH-ABI MPI engine; dadt imports it as
    # dadt._core under MPICH's or Intel MPI's launcher (frameworks/python/dadt/_mpi_abi.py).
    ext_modules=[Extension("dadt._core", sources=[]), Extension("dadt._mpich._core", sources=[])],
    data_files=[("bin", [STAGED_DADTRUN])],
    cmdclass={"build_py": BuildPy, "build_ext": BazelBuildExt},
)
