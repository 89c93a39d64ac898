import atexit
import os
import shutil
import sys
import tempfile

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

# The disk compile cache of this test session (and of the subprocesses it
# starts): a fresh directory, removed at exit, so tests never write ~/.cache and
# never depend on what an earlier run left there. Set before torchtpu reads it.
_CACHE_DIR = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
os.environ["TORCHTPU_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)

import torchtpu  # noqa: E402,F401  (registers the "tpu" device)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of `make test`; `make test-slow` runs them (README)")


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches emptied before and after a test, so compiles and recompiles
    counted in it are its own (test files of torch.compile use it for every test)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
