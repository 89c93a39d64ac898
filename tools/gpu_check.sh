#!/bin/bash
# Device check on a machine with an NVIDIA GPU and the XLA CUDA PJRT plugin
# (jax-cuda13-pjrt) in its python3: builds the runtime and the binding against that
# python's torch, runs the C tests and a slice of the Python tests on the CUDA plugin.
# Logs go to $OUT (default ./gpu-check-out). Through the device tool, one call:
#   PER_FILE=60 BENCH=dispatch,mlp_train bash tools/gpu_check.sh
# with timeout_s 480: about 3 minutes of building and C tests, a minute of demos, then
# the test files and the benchmark; the machine's start is a minute or two more.
OUT=${OUT:-$PWD/gpu-check-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PY:-python3}
nvidia-smi -L; $PY -V; $PY -c "import torch; print('torch', torch.__version__)"
PLUG=$($PY -c "import jax_plugins.xla_cuda13 as m, os; print(os.path.join(os.path.dirname(m.__file__), 'xla_cuda_plugin.so'))")
echo "plugin: $PLUG"; export TORCHTPU_PJRT_PLUGIN=$PLUG
SECONDS=0
# The runtime with -Werror off, so one run reports every warning this compiler finds.
RT_CFLAGS="-std=c11 -g -fPIC -Wall -Wextra -Iruntime/include -Iruntime/src -D_POSIX_C_SOURCE=200809L -O2"
# The device image's torch may predate the pinned one: shims for its headers, applied
# to this (throwaway) copy of the sources only.
if $PY -c "import torch, sys; sys.exit(int(tuple(map(int, torch.__version__.split('.')[:2])) >= (2, 13)))"; then
  echo "torch < 2.13: applying header shims"
  sed -i '0,/^namespace torchtpu {/s//namespace torchtpu { using at::DimnameList;/' torchtpu/csrc/autocast.cpp
  sed -i 's/c10d::PreMulSumSupplement/c10d::NCCLPreMulSumSupplement/; s/OpType::REDUCE_SCATTER_TENSOR_COALESCED/OpType::COALESCED/' torchtpu/csrc/c10d.cpp
fi
make -j16 VPY=$PY STAMP=Makefile CFLAGS="$RT_CFLAGS" build/rt_tests > "$OUT/build_rt.log" 2>&1; echo "runtime build rc=$? ${SECONDS}s"; grep -E "warning|error" "$OUT/build_rt.log" | head -30
timeout 90 build/rt_tests > "$OUT/ctest.log" 2>&1; echo "ctest rc=$? ${SECONDS}s"; grep -iE "fail|error" "$OUT/ctest.log" | head -30; tail -3 "$OUT/ctest.log"
make -j16 VPY=$PY STAMP=Makefile CFLAGS="$RT_CFLAGS" all > "$OUT/build_bind.log" 2>&1; rc=$?; echo "binding build rc=$rc ${SECONDS}s"
if [ $rc != 0 ]; then grep -E "error" "$OUT/build_bind.log" | head -40; exit 1; fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 60 $PY -m torchtpu; echo "info rc=$? ${SECONDS}s"
timeout 30 $PY -c "import torch, torchtpu; print('mem_get_info', torch.tpu.mem_get_info())"
# The demo twice: the first run compiles (and fills the disk cache), the second
# loads every program from it, so its time is the steady state.
export TORCHTPU_CACHE_DIR=$PWD/gpu-cache
timeout 90 $PY examples/demo.py; echo "demo (cold cache) rc=$? ${SECONDS}s"
timeout 90 $PY examples/demo.py; echo "demo (warm cache) rc=$? ${SECONDS}s"
TORCHTPU_EAGER_MODE=fused timeout 90 $PY examples/demo.py; echo "fused demo rc=$? ${SECONDS}s"
# Test files not yet run on the CUDA plugin first (docs/platforms.md says which ran);
# one log for all (the device tool brings back at most 8 files).
for f in ${GPU_TESTS:-tests/test_memory.py tests/test_streams.py tests/test_fused.py tests/test_compile.py tests/test_ops_index.py}; do
  echo "== $f" >> "$OUT/tests.log"
  timeout ${PER_FILE:-100} $PY -m pytest -q -p no:cacheprovider -rf $f >> "$OUT/tests.log" 2>&1
  echo "$f rc=$? ${SECONDS}s: $(tail -1 "$OUT/tests.log")"
done
grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head -40
# Per-op cost and the train steps against PyTorch eager on this machine's CPU.
[ -n "$BENCH" ] && timeout ${BENCH_S:-120} $PY bench/run.py --quick --no-warm-first --workloads $BENCH \
  --backends tpu,tpu-fused,cpu --out /tmp/gpu-bench > "$OUT/bench.log" 2>&1; echo "bench rc=$? ${SECONDS}s"
[ -f /tmp/gpu-bench/bench.md ] && cp /tmp/gpu-bench/bench.md "$OUT/bench.md"
