#!/usr/bin/env bash
# Builds dadt's CUDA build without Bazel, for a GPU machine that has Python, PyTorch (CUDA), nvcc
# and pybind11 but no Bazel, no apt and no network. Two steps:
#
#   bash tools/device_build.sh fetch      # here (Debian 12 with Bazel and apt): writes .device/
#       - the Debian packages dadt builds against (Gloo and its libraries, CLI11, nlohmann-json,
#         yaml-cpp, DLPack, Eigen), fetched with `apt-get download` into .device/debs/;
#       - the source lists of //frameworks/bindings:_core.so, //dadtrun:dadtrun and the GPU gtests
#         (GPU_TESTS below), taken from `bazel query` so that the BUILD files stay the one place
#         that says what is compiled; GoogleTest comes as Debian's libgtest-dev.
#   bash tools/device_build.sh build [PYTHON]   # there, in a copy of the tree that has .device/
#       - unpacks the .debs into .device/prefix with `dpkg -x` (or ar + tar);
#       - compiles the .cu files with nvcc (-arch=native; DADT_NVCC_ARCH overrides), the C++ with
#         g++ (-j nproc), links
#         .device/out/_core.so (NCCL and Gloo found through an rpath), .device/out/dadtrun and
#         one binary per GPU gtest (.device/out/cuda_device_test, .device/out/nccl_error_test);
#       - links _core.so into frameworks/python/dadt/ so that the tree itself is importable.
#   Then:  export PYTHONPATH=$PWD/frameworks/python PATH=$PWD/.device/out:$PATH
#          dadtrun --gloo -np 1 python -m pytest -q test/python_multirank/test_gpu.py
#
# The device build leaves MPI out (the MPI backend and Open MPI's many libraries): GPU tensors go
# to NCCL, or are staged through Gloo. .device/ is git-ignored; hand it to the device with the
# device tool's `carry` (it is a few MiB).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEV=.device
DEBS=(libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
      libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libdlpack-dev libeigen3-dev libgtest-dev
      libssl-dev libssl3)  # libssl-dev: libcrypto's HMAC (runtime/common/auth)
# The C++ tests that need a GPU (test/runtime/backends/nccl/BUILD), built with CUDA enabled.
GPU_TESTS=(cuda_device_test nccl_error_test)

sources() {  # workspace .cc/.cu files that `target` is built from, minus the MPI engine
    bazel query --noshow_progress "kind('source file', deps($1))" 2>/dev/null |
        grep -E '^//[^@]*:.*\.(cc|cu)$' | grep -v '^//runtime/backends/mpi' |
        sed -e 's|^//||' -e 's|:|/|' -e 's|^/||'
}

fetch() {
    rm -rf "$DEV" && mkdir -p "$DEV/debs"
    (cd "$DEV/debs" && apt-get download "${DEBS[@]}")
    sources //frameworks/bindings:_core.so > "$DEV/core_sources.txt"
    sources //dadtrun:dadtrun > "$DEV/dadtrun_sources.txt"
    # deps() holds both branches of the tests' select(); the CUDA build takes the real test file.
    for t in "${GPU_TESTS[@]}"; do
        sources "//test/runtime/backends/nccl:$t" | grep -v cuda_not_built_test.cc > "$DEV/test_${t}_sources.txt"
    done
    echo "fetched $(ls "$DEV/debs" | wc -l) packages ($(du -sh "$DEV" | cut -f1)); sources:" \
         "$(wc -l < "$DEV/core_sources.txt") for _core.so, $(wc -l < "$DEV/dadtrun_sources.txt") for dadtrun"
}

unpack() {
    local deb="$1" prefix="$2"
    if command -v dpkg >/dev/null; then dpkg -x "$deb" "$prefix"; return; fi
    local tmp; tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$OLDPWD/$deb" && tar -xf data.tar.* -C "$OLDPWD/$prefix")
    rm -rf "$tmp"
}

build() {
    local py="${1:-python3}"
    [ -s "$DEV/core_sources.txt" ] || { echo "no $DEV/core_sources.txt: run '$0 fetch' on a machine with Bazel" >&2; exit 2; }
    local prefix="$DEV/prefix" obj="$DEV/obj" out="$DEV/out"
    mkdir -p "$prefix" "$obj" "$out"
    for deb in "$DEV"/debs/*.deb; do unpack "$deb" "$prefix"; done
    # The rpaths are DT_RPATH (--disable-new-dtags), which also serves the unpacked libraries' own
    # needs (libgloo's libhiredis and libibverbs); DT_RUNPATH would serve only _core.so's direct ones.
    local pyinc pybind nccl nvcc cuda
    pyinc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    pybind="$("$py" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null || echo /usr/include)"
    nccl="$("$py" -c 'import importlib.util as u; print(list(u.find_spec("nvidia.nccl").submodule_search_locations)[0])')"
    # nvcc and the toolkit root exactly as the Bazel build finds them (tools/configure_cuda.py).
    read -r nvcc cuda < <("$py" -c 'import sys; sys.path.insert(0, "tools"); import configure_cuda as c
n = c.find_nvcc(); print(n or "-", c.find_cuda_home(n) or "-")')
    [ "$nvcc" != - ] && [ "$cuda" != - ] || { echo "nvcc or the CUDA headers not found" >&2; exit 2; }
    local lib="$ROOT/$prefix/usr/lib" arch_lib="$ROOT/$prefix/usr/lib/x86_64-linux-gnu"
    # runtime/backends/gloo/compat: a header Debian's libgloo-dev lacks (//runtime/backends/gloo:gloo_compat).
    local inc=(-I. -Iruntime/backends/gloo/compat -I"$prefix/usr/include" -I"$prefix/usr/include/x86_64-linux-gnu" -I"$prefix/usr/include/eigen3" -I"$cuda/include" -I"$nccl/include"
               -I"$pyinc" -I"$pybind")
    local cxx=(g++ -std=c++17 -O2 -g1 -fPIC -Wno-deprecated-declarations "${inc[@]}")
    # Compile every source once, in parallel; object names follow the source path.
    compile_one() {
        local src="$1" o="$obj/${1//\//_}.o"
        case "$src" in
            *.cu) "$nvcc" -std=c++17 -O3 ${DADT_NVCC_ARCH:--arch=native} -Xcompiler=-fPIC -I. -c "$src" -o "$o" ;;
            frameworks/bindings/*) "${cxx[@]}" -fvisibility=hidden -c "$src" -o "$o" ;;
            dadtrun/*) "${cxx[@]}" -c "$src" -o "$o" ;;
            *) "${cxx[@]}" -c "$src" -o "$o" ;;
        esac
    }
    export -f compile_one
    export obj nvcc
    local all; all="$(sort -u "$DEV/core_sources.txt" "$DEV/dadtrun_sources.txt" "$DEV"/test_*_sources.txt)"
    CXX_FLAGS="${cxx[*]}" xargs -P "$(nproc)" -I{} bash -c 'cxx=($CXX_FLAGS); compile_one "$@"' _ {} <<<"$all"
    objs() { while read -r s; do echo "$obj/${s//\//_}.o"; done < "$1"; }
    g++ -shared -o "$out/_core.so" $(objs "$DEV/core_sources.txt") \
        -L"$lib" -lgloo -L"$arch_lib" -lcrypto -L"$cuda/lib64" -lcudart_static -L"$nccl/lib" -l:libnccl.so.2 -ldl -lrt -lpthread \
        -Wl,--disable-new-dtags -Wl,-rpath,"$lib:$arch_lib:$nccl/lib"
    g++ -o "$out/dadtrun" $(objs "$DEV/dadtrun_sources.txt") -L"$arch_lib" -l:libyaml-cpp.a -lcrypto -lpthread \
        -Wl,-rpath,"$lib:$arch_lib"
    for t in "${GPU_TESTS[@]}"; do
        g++ -o "$out/$t" $(objs "$DEV/test_${t}_sources.txt") -L"$arch_lib" -l:libgtest_main.a -l:libgtest.a \
            -L"$cuda/lib64" -lcudart_static -L"$nccl/lib" -l:libnccl.so.2 -ldl -lrt -lpthread -Wl,-rpath,"$nccl/lib"
    done
    ln -sf "$ROOT/$out/_core.so" frameworks/python/dadt/_core.so
    (cd / && PYTHONPATH="$ROOT/frameworks/python" "$py" -c \
        'import dadt.torch as d, dadt._core as c; print("built:", c.built_backends(), "cuda:", c.cuda_available())')
    echo "export PYTHONPATH=$ROOT/frameworks/python PATH=$ROOT/$out:\$PATH"
}

case "${1:-}" in
    fetch) fetch ;;
    build) shift; build "$@" ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
esac
