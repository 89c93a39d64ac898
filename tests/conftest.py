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


# The files that take a minute or more (compiles, subprocesses), heaviest first. make test's
# workers (pytest-xdist --dist loadfile --no-loadscope-reorder) take files in collection
# order, so these go first and the workers finish together instead of one running the
# last heavy file alone. A stale list only costs balance: every file still runs.
_HEAVY_FILES = ("test_ops_eig.py", "test_compile_trace_cache.py", "test_ops_qr_eigh.py",
                "test_distributed.py", "test_compile.py", "test_ops_svd.py", "test_compile_cache.py",
                "test_fused.py", "test_models_fast.py", "test_ops_reduce.py", "test_ops_elementwise.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_HEAVY_FILES)}
    # a stable sort: each file's tests keep their order and stay together
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
