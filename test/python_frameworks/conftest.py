"""Shared fixtures of the TensorFlow and JAX collective suites (tf/ and jax/), which every rank runs
under the launcher, one framework per launch:

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_frameworks/tf    # N = 2, 3
    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_frameworks/jax

tools/run_framework_tests.sh runs them (`make test-python-frameworks`). The rules of test/python_multirank hold:
every rank runs the same tests in the same order with the same collective names (the `nm` fixture),
collectives first, assertions after; a watchdog ends a rank stuck past DADT_TEST_WATCHDOG_S seconds.
Each suite's own conftest.py provides `fw`, an adapter with the same interface for both frameworks.
"""
import faulthandler
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_WATCHDOG_S = float(os.environ.get("DADT_TEST_WATCHDOG_S", "180"))
_stderr_copy = None


def pytest_configure(config):
    global _stderr_copy
    _stderr_copy = os.dup(2)  # pytest captures fd 2 during tests; the watchdog writes here


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(_WATCHDOG_S, exit=True,
                                      file=_stderr_copy if _stderr_copy is not None else sys.__stderr__)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def world(fw):
    return fw.world()


@pytest.fixture
def multi_rank(fw):
    if fw.dadt.size() < 2:
        pytest.skip("a cross-rank mismatch needs at least 2 ranks")


@pytest.fixture
def halves(fw, world):
    """The even and the odd ranks as two process sets at once; yields this rank's."""
    if world.size < 2:
        pytest.skip("two process sets need 2 ranks")
    dadt = fw.dadt
    even = dadt.add_process_set([r for r in range(world.size) if r % 2 == 0])
    odd = dadt.add_process_set([r for r in range(world.size) if r % 2 == 1])
    yield even if world.rank % 2 == 0 else odd
    dadt.remove_process_set(odd)
    dadt.remove_process_set(even)


@pytest.fixture
def nm(request):
    """nm("x") -> a collective name unique to this test, the same on every rank."""
    prefix = f"{request.module.__name__}.{request.node.name}"
    return lambda suffix="": f"{prefix}.{suffix}" if suffix != "" else prefix
