#!/usr/bin/env python3
"""Bazel invocation shared by setup.py (`pip install .`) and the Makefile.

One place for the targets and the flags, so that `make build`, `make test` (bazel test) and the build
that pip runs all hit the same Bazel action cache instead of rebuilding each other's outputs.

    python3 tools/bazel_build.py build            # build the shipped targets, print their paths
    python3 tools/bazel_build.py test [ARGS...]   # bazel test with the same flags (ARGS go last)
    python3 tools/bazel_build.py flags            # print the flags, one per line

Flags:
  -c opt                                  release build of everything that ships
  --repo_env=PYTHON_BIN_PATH=<python>     WORKSPACE's python_configure reads it: the extension is
                                          compiled against the headers of the Python that installs it
  --incompatible_strict_action_env        actions get a fixed PATH; without it every pip build
                                          (pyenv shims and pip's build-isolation dirs change PATH)
                                          would miss the action cache and rebuild from scratch
Environment: BAZEL (the bazel binary, default `bazel`), DADT_BAZEL_FLAGS (extra flags, space separated),
DADT_CUDA (0: build without CUDA/NCCL even when found; 1: fail when they are missing). Before each
build or test, tools/configure_cuda.py rewrites .bazelrc.cuda (the CUDA/NCCL build when nvcc, the
CUDA headers and NCCL are found; see docs/backends.md).
"""

import os
import shlex
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# label -> path of its output under bazel-bin
DADTRUN = "//dadtrun:dadtrun"
CORE_MODULE = "//frameworks/bindings:_core.so"
# The same module over the MPICH-ABI MPI engine (MPICH, Intel MPI): dadt/_mpich/_core.so.
CORE_MODULE_MPICH = "//frameworks/bindings:_mpich/_core.so"
TARGETS = {
    DADTRUN: "dadtrun/dadtrun",
    CORE_MODULE: "frameworks/bindings/_core.so",
    CORE_MODULE_MPICH: "frameworks/bindings/_mpich/_core.so",
}


class BazelError(RuntimeError):
    pass


def bazel_binary():
    bazel = os.environ.get("BAZEL", "bazel")
    path = shutil.which(bazel)
    if not path:
        raise BazelError(
            "bazel not found on PATH (BAZEL=%s). Install the build dependencies first: `make deps` "
            "(Debian: apt-get install bazel-bootstrap)." % bazel)
    return path


def configure(python=None):
    """Writes .bazelrc.cuda (tools/configure_cuda.py): the CUDA/NCCL build when they are found."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import configure_cuda
    try:
        print(configure_cuda.configure(python or sys.executable), file=sys.stderr, flush=True)
    except RuntimeError as e:
        raise BazelError(str(e))


def bazel_flags(python=None):
    python = python or sys.executable
    flags = [
        "-c", "opt",
        "--repo_env=PYTHON_BIN_PATH=%s" % python,
        "--incompatible_strict_action_env",
    ]
    flags += shlex.split(os.environ.get("DADT_BAZEL_FLAGS", ""))
    return flags


def _ui_flags():
    # Plain, line-oriented output in pip logs and CI; these do not affect caching. Debian's Bazel 4.2.3
    # has --sandbox_debug on, which prints ~40 lines of linux-sandbox tracing per compile action.
    return ["--color=no", "--curses=no", "--nosandbox_debug"]


def _run(cmd, cwd, capture=False):
    print("+ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        if capture:
            return subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.PIPE,
                                  universal_newlines=True).stdout
        subprocess.run(cmd, cwd=cwd, check=True)
    except subprocess.CalledProcessError as e:
        raise BazelError("command failed with exit code %d: %s" % (e.returncode, " ".join(cmd)))
    return None


def bazel_bin(root=ROOT, python=None):
    """The output directory of the configuration that bazel_flags() selects (e.g. .../k8-opt/bin)."""
    out = _run([bazel_binary(), "info"] + bazel_flags(python) + ["bazel-bin"], cwd=root, capture=True)
    return out.strip().splitlines()[-1].strip()


def build(root=ROOT, python=None, targets=None):
    """Build the shipped targets; return {label: absolute path of the output}."""
    targets = list(targets or TARGETS)
    bazel = bazel_binary()
    configure(python)
    _run([bazel, "build"] + bazel_flags(python) + _ui_flags() + targets, cwd=root)
    bin_dir = bazel_bin(root, python)
    outputs = {}
    for label in targets:
        path = os.path.join(bin_dir, TARGETS[label])
        if not os.path.isfile(path):
            raise BazelError("bazel built %s but %s is missing" % (label, path))
        outputs[label] = path
    return outputs


def test(args, root=ROOT, python=None):
    """bazel test with the shared flags; returns Bazel's exit code (4: no test targets)."""
    configure(python)
    cmd = [bazel_binary(), "test"] + bazel_flags(python) + _ui_flags() + list(args)
    print("+ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.call(cmd, cwd=root)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "build":
            for label, path in build().items():
                print("%s -> %s" % (label, path))
            return 0
        if cmd == "test":
            return test(rest)
        if cmd == "flags":
            print("\n".join(bazel_flags()))
            return 0
    except BazelError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    print("unknown command %r; see --help" % cmd, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
