"""Runs one of Horovod's own test files against dadt, unchanged, in the current process.

    dadtrun --gloo -np 2 python3 test/conformance/horovod_harness.py PATH/test_torch.py [pytest args]
    python3 test/conformance/horovod_harness.py PATH/test_torch.py -k gpu     # one rank, no launcher
    ... horovod_harness.py --deselect-file LIST PATH/test_torch.py [pytest args]

--deselect-file LIST deselects the tests whose names (the function's, exactly; pytest's own
--deselect matches prefixes, and test_broadcast_state would take test_broadcast_state_no_grad
along) are listed in LIST, one a line, '#' starting a comment; a listed name the file does not
have is an error, so the list cannot go stale unnoticed. A name may be followed by `size>=N`:
then it is deselected only in a launch of N ranks or more (DADT_SIZE, or under mpirun
OMPI_COMM_WORLD_SIZE or PMI_SIZE; a process without any of them counts as 1).

What Horovod's test files need from the machine they run on, made here in a temporary directory that
is removed afterwards (nothing is installed, and a real Horovod elsewhere is never shadowed):
- a package `horovod` whose `horovod.torch` (and `horovod.tensorflow`, `horovod.keras`) is the dadt
  module of the same framework, imported lazily so that a file only pays for the framework it tests;
- a module `common` with the three helpers the files import from Horovod's test/utils
  (`mpi_env_rank_and_size`, `skip_or_fail_gpu_test`, `temppath`);
- HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, ... copied from dadt's own variables when a launcher
  set them, so that the files take the branches they take under `horovodrun --gloo`.
The exit status is pytest's.
"""
import os
import sys
import tempfile
import textwrap

_ALIAS = textwrap.dedent("""
    import importlib, sys
    sys.modules[__name__] = importlib.import_module({target!r})
""")

_COMMON = textwrap.dedent('''
    """Stand-ins for the helpers of Horovod's test/utils/common.py (written by dadt's harness)."""
    import contextlib, os, shutil, tempfile

    def mpi_env_rank_and_size():
        for rank_var, size_var in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                   ("PMI_RANK", "PMI_SIZE")):
            if rank_var in os.environ and size_var in os.environ:
                return int(os.environ[rank_var]), int(os.environ[size_var])
        return 0, 1

    def skip_or_fail_gpu_test(test, message):
        test.skipTest(message)

    @contextlib.contextmanager
    def temppath():
        d = tempfile.mkdtemp()
        try:
            yield os.path.join(d, "file")
        finally:
            shutil.rmtree(d, ignore_errors=True)
''')

# Horovod's variable <- dadt's variable, copied only where dadt's is set (i.e. under a launcher).
_ENV = {"HOROVOD_RANK": "DADT_RANK", "HOROVOD_SIZE": "DADT_SIZE",
        "HOROVOD_LOCAL_RANK": "DADT_LOCAL_RANK", "HOROVOD_LOCAL_SIZE": "DADT_LOCAL_SIZE",
        "HOROVOD_CROSS_RANK": "DADT_CROSS_RANK", "HOROVOD_CROSS_SIZE": "DADT_CROSS_SIZE"}


def write_shims(root):
    pkg = os.path.join(root, "horovod")
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    for name, target in (("torch", "dadt.torch"), ("tensorflow", "dadt.tensorflow"),
                         ("keras", "dadt.keras")):
        with open(os.path.join(pkg, name + ".py"), "w") as f:
            f.write(_ALIAS.format(target=target))
    with open(os.path.join(root, "common.py"), "w") as f:
        f.write(_COMMON)


class _DeselectByName:
    """pytest plugin: deselects the tests whose function names are in `names`, exactly."""

    def __init__(self, names, listed, source):
        self.names, self.listed, self.source = names, listed, source

    def pytest_collection_modifyitems(self, config, items):
        found = {item.originalname or item.name for item in items}
        missing = sorted(self.listed - found)
        if missing:
            raise ValueError("%s lists tests the file does not have: %s"
                             % (self.source, ", ".join(missing)))
        dropped = [i for i in items if (i.originalname or i.name) in self.names]
        items[:] = [i for i in items if (i.originalname or i.name) not in self.names]
        config.hook.pytest_deselected(items=dropped)


def _read_names(path, size):
    """The names LIST deselects in a launch of `size` ranks, and every name it lists."""
    names, listed = set(), set()
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            listed.add(words[0])
            cond = words[1:]
            if not cond:
                names.add(words[0])
            elif len(cond) == 1 and cond[0].startswith("size>=") and cond[0][6:].isdigit():
                if size >= int(cond[0][6:]):
                    names.add(words[0])
            else:
                raise ValueError("%s:%d: after the test name only 'size>=N' may follow, not %r"
                                 % (path, number, " ".join(cond)))
    return names, listed


def main(argv):
    plugins = []
    if argv[:1] == ["--deselect-file"]:
        if len(argv) < 2 or not os.path.isfile(argv[1]):
            sys.stderr.write("error: --deselect-file needs an existing file\n")
            return 2
        size = next((int(os.environ[v]) for v in ("DADT_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
                     if v in os.environ), 1)
        names, listed = _read_names(argv[1], size)
        plugins.append(_DeselectByName(names, listed, argv[1]))
        argv = argv[2:]
    if not argv or not os.path.isfile(argv[0]):
        sys.stderr.write("usage: horovod_harness.py PATH/TO/HOROVOD/test_FILE.py [pytest args]\n"
                         "error: %s\n" % ("no test file given" if not argv else "no such file: " + argv[0]))
        return 2
    for hvd_var, dadt_var in _ENV.items():
        if dadt_var in os.environ:
            os.environ[hvd_var] = os.environ[dadt_var]
    import pytest
    with tempfile.TemporaryDirectory(prefix="dadt-horovod-") as root:
        write_shims(root)
        sys.path.insert(0, root)
        # Horovod's files live in test/parallel and import `common` from ../utils; that is `root` here.
        return pytest.main(["-p", "no:cacheprovider", "--rootdir", os.path.dirname(os.path.abspath(argv[0]))]
                           + argv[1:] + [argv[0]], plugins=plugins)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
