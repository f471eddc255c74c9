"""Which deep-learning frameworks this Python can use with dadt, found without importing them.

    >>> from dadt.common.frameworks import available_frameworks
    >>> available_frameworks()
    {'torch': '2.13.0+cpu', 'tensorflow': '2.21.0', 'keras': '3.15.1', 'jax': '0.10.2'}

Each front end (dadt.torch, dadt.tensorflow, dadt.keras, dadt.jax, dadt.mxnet) imports its framework through
`require`, so a missing one fails with an ImportError that says what to install.
"""

import importlib
import importlib.util
from importlib import metadata
from types import ModuleType
from typing import Dict, Optional

# front end -> (module it needs, distributions that may provide it, what to install)
_NEEDS = {
    "torch": ("torch", ("torch",), "pip install torch==2.13.0"),
    "tensorflow": ("tensorflow", ("tensorflow-cpu", "tensorflow"),
                   "pip install tensorflow-cpu==2.21.0"),
    "keras": ("keras", ("keras",), "pip install tensorflow-cpu==2.21.0  (it brings Keras 3)"),
    "jax": ("jax", ("jax",), "pip install 'jax[cpu]==0.10.2' optax==0.2.8"),
    "mxnet": ("mxnet", ("mxnet",), "bash tools/mxnet_venv.sh  (MXNet 1.9.1 in its own virtualenv: "
              "it needs NumPy < 1.24)"),
}


def _version(distributions) -> Optional[str]:
    for dist in distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def available_frameworks() -> Dict[str, Optional[str]]:
    """Maps each front end's framework that is installed to its version (None when the version
    is unknown). Nothing is imported: the answer is cheap and side-effect free."""
    found = {}
    for front_end, (module, distributions, _) in _NEEDS.items():
        if importlib.util.find_spec(module) is not None:
            found[front_end] = _version(distributions)
    return found


def require(front_end: str) -> ModuleType:
    """Imports the framework that ``dadt.<front_end>`` needs, or raises an ImportError that
    names it and says how to install it."""
    module, _, hint = _NEEDS[front_end]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError("dadt.%s needs %s, which cannot be imported (%s); install it with: %s"
                          % (front_end, module, e, hint)) from e
