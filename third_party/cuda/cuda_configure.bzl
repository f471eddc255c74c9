"""Repository rule @local_cuda: the CUDA toolkit and NCCL that tools/configure_cuda.py found.

It reads DADT_CUDA_HOME, DADT_NVCC and DADT_NCCL_HOME (set by `--config=cuda` in .bazelrc.cuda).
With all three it exposes:
  @local_cuda//:cuda_headers  the toolkit's include/
  @local_cuda//:cudart        the static CUDA runtime (no libcudart.so needed at run time)
  @local_cuda//:nccl          include/nccl.h and lib/libnccl.so.2, with an rpath to that lib folder and
                              to the wheel's place next to the installed dadt package
  @local_cuda//:defs.bzl      NVCC (absolute path) and CUDA_ENABLED
Without them every target is an empty cc_library, so nothing that depends on them under
select(//tools/cuda:enabled) is built.
"""

_EMPTY_BUILD = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "nccl")
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda/include/**"]),
    includes = ["cuda/include"],
)
cc_library(
    name = "cudart",
    srcs = ["cuda/lib64/libcudart_static.a"],
    linkopts = ["-ldl", "-lrt", "-lpthread"],
    deps = [":cuda_headers"],
)
cc_library(
    name = "nccl",
    srcs = ["nccl/lib/libnccl.so.2"],
    hdrs = ["nccl/include/nccl.h"],
    includes = ["nccl/include"],
    # The wheel's lib folder, both where it was at build time and where pip puts it beside the
    # installed package (site-packages/dadt/_core.so -> site-packages/nvidia/nccl/lib).
    linkopts = [
        "-Wl,-rpath,{nccl_lib}",
        "-Wl,-rpath,'$$ORIGIN/../nvidia/nccl/lib'",
    ],
    deps = [":cuda_headers"],
)
"""

def _cuda_configure_impl(ctx):
    env = ctx.os.environ
    cuda_home = env.get("DADT_CUDA_HOME", "")
    nvcc = env.get("DADT_NVCC", "")
    nccl_home = env.get("DADT_NCCL_HOME", "")
    if not (cuda_home and nvcc and nccl_home):
        ctx.file("BUILD", _EMPTY_BUILD)
        ctx.file("defs.bzl", "CUDA_ENABLED = False\nNVCC = \"\"\n")
        return
    for path in [nvcc, cuda_home + "/include/cuda_runtime.h", nccl_home + "/include/nccl.h",
                 nccl_home + "/lib/libnccl.so.2"]:
        if not ctx.path(path).exists:
            fail("--config=cuda: %s does not exist; re-run tools/configure_cuda.py" % path)
    ctx.symlink(cuda_home + "/include", "cuda/include")
    ctx.symlink(cuda_home + "/lib64/libcudart_static.a", "cuda/lib64/libcudart_static.a")
    ctx.symlink(nccl_home + "/include/nccl.h", "nccl/include/nccl.h")
    ctx.symlink(nccl_home + "/lib/libnccl.so.2", "nccl/lib/libnccl.so.2")
    ctx.file("BUILD", _BUILD.replace("{nccl_lib}", nccl_home + "/lib"))
    ctx.file("defs.bzl", "CUDA_ENABLED = True\nNVCC = \"%s\"\nCUDA_HOME = \"%s\"\n" % (nvcc, cuda_home))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["DADT_CUDA_HOME", "DADT_NVCC", "DADT_NCCL_HOME"],
    local = True,
)
