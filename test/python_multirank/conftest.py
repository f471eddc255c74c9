"""Collective test suite for dadt.torch, run by every rank under the launcher.

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_multirank      # N = 1, 2, 3, 4

Rules every test in this folder follows, so that one failing rank never leaves the others hanging:
- every rank collects and runs the same tests in the same order (skips depend on size() only);
- every collective is called by every rank, in the same order, with a name unique to the test
  (the `nm` fixture); collectives come first, assertions after;
- a per-test watchdog (faulthandler, no plugin needed) dumps every thread's stack and exits the
  rank when a test runs past DADT_TEST_WATCHDOG_S seconds (default 120; the outer
  per-launch limit is tools/run_python_tests.sh's DADT_TEST_TIMEOUT), which makes dadtrun stop the
  whole job instead of letting it hang until the outer `timeout`.
"""
import faulthandler
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dadt.torch as dadt  # noqa: E402

_TEST_TIMEOUT_S = float(os.environ.get("DADT_TEST_WATCHDOG_S", "120"))
_watchdog_fd = None


def pytest_configure(config):
    # pytest captures fd 2 during each test; keep a copy of the real stderr for the watchdog's dump.
    global _watchdog_fd
    _watchdog_fd = os.dup(2)


@pytest.fixture(scope="session", autouse=True)
def dadt_session():
    """Initialises the runtime once for the whole session and shuts it down at the end."""
    torch.set_num_threads(1)
    dadt.init()
    yield
    dadt.shutdown()


@pytest.fixture(autouse=True)
def _watchdog():
    out = _watchdog_fd if _watchdog_fd is not None else sys.__stderr__
    faulthandler.dump_traceback_later(_TEST_TIMEOUT_S, exit=True, file=out)
    yield
    faulthandler.cancel_dump_traceback_later()


class World:
    def __init__(self):
        self.rank = dadt.rank()
        self.size = dadt.size()

    def __repr__(self):
        return f"World(rank={self.rank}, size={self.size})"


@pytest.fixture
def world():
    """rank/size of this process (after init)."""
    return World()


@pytest.fixture
def require_two_ranks():
    """Skips (on every rank alike) where the test needs ranks that can disagree."""
    if dadt.size() < 2:
        pytest.skip("a cross-rank mismatch needs at least 2 ranks")


@pytest.fixture
def nm(request):
    """nm("x") -> a collective name unique to this test (same on every rank)."""
    prefix = f"{request.module.__name__}.{request.node.name}"

    def make(suffix=""):
        return f"{prefix}.{suffix}" if suffix != "" else prefix

    return make
