"""Repository rule that finds the Python headers of the interpreter that builds dadt.

The interpreter is $PYTHON_BIN_PATH when set (pip passes its own), else python3 on PATH.
pybind11 comes from Debian's pybind11-dev (/usr/include/pybind11).
"""

def _python_configure_impl(ctx):
    python = ctx.os.environ.get("PYTHON_BIN_PATH") or ctx.which("python3")
    if not python:
        fail("python3 not found; set PYTHON_BIN_PATH")
    res = ctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
    if res.return_code != 0:
        fail("cannot query Python include dir: " + res.stderr)
    inc = res.stdout.strip()
    ctx.symlink(inc, "python_include")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)
""")

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["PYTHON_BIN_PATH"],
    local = True,
)
