"""The dadt.mxnet suite: run inside the MXNet virtualenv (tools/mxnet_venv.sh), under the launcher:

    PY=$(tools/mxnet_venv.sh)
    dadtrun --gloo -np 2 $PY -m pytest -q -p no:cacheprovider test/python_frameworks/mx
    dadtrun --mpi -np 2 $PY -m pytest -q -p no:cacheprovider test/python_frameworks/mx

The rules of ../conftest.py hold (same tests, same order, same names on every rank; a watchdog).
Under an interpreter without MXNet (the main one: NumPy 2) every test module skips itself.
"""
import pytest

from values import world as _world


class MxnetAdapter:
    def __init__(self):
        import dadt.mxnet as dadt  # here, not at import: the test modules skip without mxnet
        self.dadt = dadt

    def world(self):
        return _world(self.dadt)


@pytest.fixture(scope="session")
def fw():
    adapter = MxnetAdapter()
    adapter.dadt.init()
    yield adapter
    adapter.dadt.shutdown()


def pytest_configure(config):
    # MXNet 1.9 reads scipy.sparse.csr, which SciPy 1.11 deprecates, on every mx.nd.array call.
    config.addinivalue_line("filterwarnings", "ignore:Please use `csr_matrix`:DeprecationWarning")
