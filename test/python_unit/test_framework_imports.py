"""Front ends load only their own framework, and a missing framework says what to install.

Each check runs in a fresh interpreter (a subprocess), since sys.modules is per process.
"""
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "tensorflow", "keras", "jax", "jaxlib", "optax")
# front end -> its framework. A front end may load what its framework loads (TensorFlow 2.21 imports
# Keras, and JAX when it is installed, from tf.lite), and nothing more.
FRAMEWORK = {
    "dadt": None,
    "dadt.common.basics": None,
    "dadt.common.frameworks": None,
    "dadt.torch": "torch",
    "dadt.tensorflow": "tensorflow",
    "dadt.keras": "keras",
    "dadt.jax": "jax",
}


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd="/", env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def _heavy_loaded(first, then):
    """In a fresh interpreter: (heavy modules loaded by `import first`, those loaded after `import then`)."""
    head = f"import {first}\n" if first else ""
    proc = _run(f"import sys\n{head}a = [m for m in {HEAVY!r} if m in sys.modules]\n"
                f"import {then}\nprint(' '.join(a)); print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr[-2000:]
    own, after = (proc.stdout.split("\n") + ["", ""])[:2]
    return set(own.split()), set(after.split())


# Strictly none of these, whatever the framework does.
NEVER = {"dadt.torch": {"tensorflow", "keras", "jax"}, "dadt.jax": {"torch", "tensorflow", "keras"}}


@pytest.mark.parametrize("module", sorted(FRAMEWORK))
def test_imports_only_its_framework(module):
    own, loaded = _heavy_loaded(FRAMEWORK[module], module)
    assert loaded - own == set(), f"importing {module} also imported {sorted(loaded - own)}"
    crossed = loaded & NEVER.get(module, set())
    assert not crossed, f"importing {module} imported {sorted(crossed)}"


@pytest.mark.parametrize("module,framework,hint", [
    ("dadt.tensorflow", "tensorflow", "tensorflow-cpu==2.21.0"),
    ("dadt.keras", "keras", "tensorflow-cpu==2.21.0"),
    ("dadt.jax", "jax", "jax[cpu]==0.10.2"),
    ("dadt.torch", "torch", "torch==2.13.0"),
])
def test_missing_framework_says_what_to_install(module, framework, hint):
    # sys.modules[name] = None makes `import name` raise ImportError, as if it were not installed.
    proc = _run(f"import sys; sys.modules[{framework!r}] = None\n"
                f"try:\n    import {module}\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ImportError:"), proc.stdout
    assert f"{module} needs {framework}" in proc.stdout and hint in proc.stdout, proc.stdout


def test_available_frameworks_imports_nothing():
    proc = _run("import sys; from dadt.common.frameworks import available_frameworks as a; f = a(); "
                f"print(sorted(f), [m for m in {HEAVY!r} if m in sys.modules])")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['jax', 'keras', 'tensorflow', 'torch'] []", proc.stdout


def test_torch_mpi_ops_is_horovods_name_for_async_collectives():
    pytest.importorskip("torch")
    proc = _run("import dadt.torch.mpi_ops as a\n"
                "from dadt.torch import async_collectives as b, mpi_ops as c\n"
                "from dadt.torch.mpi_ops import allreduce_async_, synchronize\n"
                "print(a is b and c is b and allreduce_async_ is b.allreduce_async_)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True", proc.stdout
