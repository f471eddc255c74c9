"""Runs one of Horovod's own test files against dadt, unchanged, in the current process.

    dadtrun --gloo -np 2 python3 test/conformance/horovod_harness.py PATH/test_torch.py [pytest args]
    python3 test/conformance/horovod_harness.py PATH/test_torch.py -k gpu     # one rank, no launcher
    ... horovod_harness.py --deselect-file LIST PATH/test_torch.py [pytest args]

--deselect-file LIST deselects the tests whose names (the function's, exactly; pytest's own
--deselect matches prefixes, and test_broadcast_state would take test_broadcast_state_no_grad
along) are listed in LIST, one a line, '#' starting a comment; a listed name the file does not
have is an error, so the list cannot go stale unnoticed. A name may be followed by `size>=N`:
then it is deselected only in a launch of N ranks or more (DADT_SIZE, or under mpirun
OMPI_COMM_WORLD_SIZE or PMI_SIZE; a process without any of them counts as 1). A line `<module>`
says the file itself does not import here (a test file written for Keras 2 imports Keras 2's
modules at its top): the harness then checks that importing it does fail, and that every test the
list names is in the file, and reports every test deselected instead of running pytest (a file
that starts importing makes the list stale: an error).

What Horovod's test files need from the machine they run on, made here in a temporary directory that
is removed afterwards (nothing is installed, and a real Horovod elsewhere is never shadowed):
- a package `horovod` whose `horovod.torch` (and `horovod.tensorflow`, `horovod.keras`, and every
  submodule below them: `horovod.tensorflow.util`, `horovod.tensorflow.keras`, ...) is the very dadt
  module of the same name, imported lazily so that a file only pays for the framework it tests (an
  import hook, so that `horovod.tensorflow.util` is dadt.tensorflow.util and not a second copy);
- a module `common` with the three helpers the files import from Horovod's test/utils
  (`mpi_env_rank_and_size`, `skip_or_fail_gpu_test`, `temppath`);
- stand-ins for the three test helpers that some files import from Horovod's own packages rather
  than from test/utils: `horovod.common.util.env` (sets environment variables for a `with` block),
  `horovod.common.util.is_version_greater_equal_than` and
  `horovod.runner.common.util.env.get_env_rank_and_size` (the launch's rank and size, from
  HOROVOD_RANK/SIZE, OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE) -- nothing else of Horovod's
  internals is there, so a test that reaches further fails, saying what it reached for;
- HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, ... copied from dadt's own variables when a launcher
  set them, so that the files take the branches they take under `horovodrun --gloo`.
The exit status is pytest's.
"""
import os
import sys
import tempfile
import textwrap

# horovod/__init__.py: `horovod.<framework>[.<submodule>]` is `dadt.<framework>[.<submodule>]`, the
# same module object (a second copy of, say, dadt.tensorflow.keras would have its own globals).
_PACKAGE = textwrap.dedent("""
    \"\"\"Horovod's names for dadt's modules (written by dadt's test/conformance/horovod_harness.py).\"\"\"
    import importlib, importlib.abc, importlib.util, sys

    _FRAMEWORKS = ("torch", "tensorflow", "keras", "mxnet")

    class _DadtAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target=None):
            parts = fullname.split(".")
            if len(parts) >= 2 and parts[0] == "horovod" and parts[1] in _FRAMEWORKS:
                return importlib.util.spec_from_loader(fullname, self)
            return None

        def create_module(self, spec):
            return importlib.import_module("dadt." + spec.name[len("horovod."):])

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, _DadtAlias())
""")

# Stand-ins for the helpers of Horovod's own packages that its test files import at module level.
_COMMON_UTIL = textwrap.dedent('''
    """Stand-ins for horovod.common.util's test helpers (written by dadt's harness)."""
    import contextlib, os
    from packaging import version as _version

    @contextlib.contextmanager
    def env(**kwargs):
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        backup = {k: os.environ.get(k) for k in kwargs}
        os.environ.update(kwargs)
        try:
            yield
        finally:
            for k, v in backup.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def is_version_greater_equal_than(ver, target):
        return _version.parse(ver) >= _version.parse(target)
''')

_RUNNER_ENV = textwrap.dedent('''
    """Stand-in for horovod.runner.common.util.env.get_env_rank_and_size (written by dadt's harness)."""
    import os

    def get_env_rank_and_size():
        for rank_var, size_var in (("HOROVOD_RANK", "HOROVOD_SIZE"),
                                   ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                   ("PMI_RANK", "PMI_SIZE")):
            rank, size = os.environ.get(rank_var), os.environ.get(size_var)
            if rank is not None and size is not None:
                return int(rank), int(size)
            if rank is not None or size is not None:
                raise RuntimeError("only one of %s and %s is set" % (rank_var, size_var))
        return None
''')

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
    files = {"horovod/__init__.py": _PACKAGE,
             "horovod/common/__init__.py": "",
             "horovod/common/util.py": _COMMON_UTIL,
             "horovod/runner/__init__.py": "",
             "horovod/runner/common/__init__.py": "",
             "horovod/runner/common/util/__init__.py": "",
             "horovod/runner/common/util/env.py": _RUNNER_ENV,
             "common.py": _COMMON}
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


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


_WHOLE_MODULE = "<module>"


def _read_names(path, size):
    """The names LIST deselects in a launch of `size` ranks, and every name it lists
    (`<module>` among them when the list says the file does not import)."""
    names, listed = set(), set()
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words == [_WHOLE_MODULE]:
                listed.add(_WHOLE_MODULE)
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


def _test_names(path):
    """The test functions a file defines (at any depth: methods of its TestCase classes)."""
    import ast
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")}


def _check_unimportable(path, deselect):
    """For a list that says `<module>`: the file must fail to import, and name the tests it has."""
    import importlib.util
    tests = _test_names(path) - {"test_session"}  # tf.test.TestCase's, not the file's
    missing = sorted(deselect.listed - {_WHOLE_MODULE} - tests)
    if missing:
        sys.stderr.write("error: %s lists tests the file does not have: %s\n"
                         % (deselect.source, ", ".join(missing)))
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as e:  # noqa: BLE001 - what stops the import is the report
        print("%s does not import here (%s: %s); its tests are all deselected (%s)"
              % (os.path.basename(path), type(e).__name__, e, deselect.source))
        print("==== %d deselected in 0.00s ====" % len(tests))
        return 0
    sys.stderr.write("error: %s says %s does not import, but it does: the list is stale\n"
                     % (deselect.source, path))
    return 2


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
        if plugins and _WHOLE_MODULE in plugins[0].listed:
            return _check_unimportable(argv[0], plugins[0])
        # Horovod's files live in test/parallel and import `common` from ../utils; that is `root` here.
        return pytest.main(["-p", "no:cacheprovider", "--rootdir", os.path.dirname(os.path.abspath(argv[0]))]
                           + argv[1:] + [argv[0]], plugins=plugins)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
