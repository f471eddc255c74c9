"""cuda_object: compiles one .cu file with nvcc into a position-independent object for a cc_library.

Bazel 4 has no CUDA rules, so a genrule runs the nvcc that tools/configure_cuda.py found
(@local_cuda//:defs.bzl). The object goes into a cc_library's srcs; the host side of the .cu file
sees only its own header (plain C++ types), never dadt's headers.
"""

load("@local_cuda//:defs.bzl", "NVCC")

# Ampere (A100), Hopper (H100/H200) and Blackwell machine code, plus PTX for newer GPUs.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_100,code=[sm_100,compute_100]",
]

def cuda_object(name, src, hdrs = [], copts = []):
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".pic.o"],
        cmd = " ".join([
            NVCC,
            "-std=c++17 -O3 -Xcompiler=-fPIC -Xcompiler=-fvisibility=hidden",
            " ".join(CUDA_ARCH_FLAGS),
            " ".join(copts),
            "-I.",
            "-c $(location %s)" % src,
            "-o $@",
        ]),
        tags = ["no-remote"],
    )
