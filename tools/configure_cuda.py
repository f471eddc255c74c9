#!/usr/bin/env python3
"""Finds nvcc, the CUDA headers and NCCL, and writes .bazelrc.cuda (as TensorFlow's configure does).

    python3 tools/configure_cuda.py [--python PYTHON]   # write .bazelrc.cuda, print what was found
    python3 tools/configure_cuda.py --print             # print the fragment only

.bazelrc try-imports the fragment. When everything is found it defines `--config=cuda` and turns it on:

    build:cuda --define=dadt_cuda=1
    build:cuda --repo_env=DADT_CUDA_HOME=/usr/local/cuda
    build:cuda --repo_env=DADT_NCCL_HOME=<site-packages>/nvidia/nccl
    build --config=cuda

third_party/cuda/cuda_configure.bzl turns the two paths into @local_cuda, and runtime/backends/nccl
is built and linked into dadt. Otherwise the fragment holds only a comment saying what is missing and
the build is the CPU-only one.

Where things are looked for:
  nvcc          $DADT_NVCC, $CUDA_HOME/bin/nvcc, nvcc on PATH, /usr/local/cuda/bin/nvcc
  CUDA headers  <nvcc's toolkit>/include/cuda_runtime.h (or $CUDA_HOME/include)
  NCCL          $DADT_NCCL_HOME, else the nvidia-nccl-cu13 wheel of PYTHON (include/nccl.h and
                lib/libnccl.so.2), else /usr/include/nccl.h with /usr/lib/x86_64-linux-gnu/libnccl.so.2
Environment: DADT_CUDA=0 builds without CUDA even when everything is found; DADT_CUDA=1 makes a
missing piece an error instead of a silent CPU-only build.
"""

import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENT = os.path.join(ROOT, ".bazelrc.cuda")
# Where a toolkit is looked for when neither CUDA_HOME nor PATH names one.
DEFAULT_CUDA_ROOTS = ["/usr/local/cuda"]


def find_nvcc(env=os.environ):
    candidates = [env.get("DADT_NVCC")]
    if env.get("CUDA_HOME"):
        candidates.append(os.path.join(env["CUDA_HOME"], "bin", "nvcc"))
    candidates.append(shutil.which("nvcc", path=env.get("PATH", os.defpath)))
    candidates += [os.path.join(r, "bin", "nvcc") for r in DEFAULT_CUDA_ROOTS]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.realpath(c)
    return None


def find_cuda_home(nvcc, env=os.environ):
    """The toolkit root holding include/cuda_runtime.h and lib64/libcudart_static.a."""
    roots = []
    if env.get("CUDA_HOME"):
        roots.append(env["CUDA_HOME"])
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(nvcc)))
    roots += DEFAULT_CUDA_ROOTS
    for r in roots:
        if (os.path.isfile(os.path.join(r, "include", "cuda_runtime.h")) and
                os.path.isfile(os.path.join(r, "lib64", "libcudart_static.a"))):
            return os.path.realpath(r)
    return None


def _wheel_nccl(python):
    code = ("import importlib.util as u; s = u.find_spec('nvidia.nccl'); "
            "print(list(s.submodule_search_locations)[0] if s else '')")
    try:
        out = subprocess.run([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def find_nccl_home(python, env=os.environ):
    """A folder with include/nccl.h and lib/libnccl.so.2 (the wheel's layout)."""
    candidates = [env.get("DADT_NCCL_HOME"), _wheel_nccl(python)]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "include", "nccl.h")) and \
                os.path.isfile(os.path.join(c, "lib", "libnccl.so.2")):
            return os.path.realpath(c)
    return None


def detect(python=None, env=os.environ):
    """Returns (fragment text, one-line summary, error or None)."""
    python = python or sys.executable
    nvcc = find_nvcc(env)
    cuda_home = find_cuda_home(nvcc, env)
    nccl_home = find_nccl_home(python, env)
    missing = [what for what, found in (("nvcc", nvcc), ("the CUDA headers (cuda_runtime.h)", cuda_home),
                                       ("NCCL (pip install nvidia-nccl-cu13)", nccl_home)) if not found]
    wanted = env.get("DADT_CUDA", "")
    if wanted == "0":
        return "# CUDA disabled by DADT_CUDA=0\n", "CUDA/NCCL: disabled (DADT_CUDA=0)", None
    if missing:
        why = "not found: " + ", ".join(missing)
        err = ("DADT_CUDA=1 but the CUDA build is impossible: " + why) if wanted == "1" else None
        return "# CPU-only build; " + why + "\n", "CUDA/NCCL: off (" + why + ")", err
    text = ("# Written by tools/configure_cuda.py; do not edit.\n"
            "build:cuda --define=dadt_cuda=1\n"
            "build:cuda --repo_env=DADT_CUDA_HOME=%s\n"
            "build:cuda --repo_env=DADT_NVCC=%s\n"
            "build:cuda --repo_env=DADT_NCCL_HOME=%s\n"
            "build --config=cuda\n" % (cuda_home, nvcc, nccl_home))
    return text, "CUDA/NCCL: on (nvcc %s, NCCL %s)" % (nvcc, nccl_home), None


def configure(python=None, path=FRAGMENT, env=os.environ):
    """Writes the fragment (only when it changed, so Bazel's server keeps its state); returns summary."""
    text, summary, err = detect(python, env)
    if err:
        raise RuntimeError(err)
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:
        with open(path, "w") as f:
            f.write(text)
    return summary


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--print", action="store_true", help="print the fragment, write nothing")
    a = p.parse_args(argv)
    if a.print:
        sys.stdout.write(detect(a.python)[0])
        return 0
    try:
        print(configure(a.python))
    except RuntimeError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
