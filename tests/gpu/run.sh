#!/bin/sh
# tests/gpu/run.sh: everything that needs a GPU, in one command, for a
# machine with an NVIDIA GPU and the CUDA toolkit (/usr/local/cuda):
#   1. configures a build with -Dcuda=enabled (BUILD, default build-gpu;
#      an existing one is reused and switched to CUDA), without the GUI
#      (MPI as meson finds it: the NCCL data-parallel tests want it);
#   2. builds it (all cores);
#   3. runs `meson test --suite gpu` (every test there exits 77, skip,
#      where no CUDA device is found: a skip counts as a failure here,
#      since this script exists to run them);
#   4. runs the GPU benchmark (tests/bench/bench_gpu.py: fmnist-cnn
#      samples/s, f32 and bf16, Ember beside PyTorch when the python3 on
#      PATH, or /usr/bin/python3, has torch with CUDA);
# each step under `timeout`, and prints a summary. Exit status: 0 when
# every step passed, else 1.
#
# usage: tests/gpu/run.sh [BUILD]
# environment: GPU_TEST_TIMEOUT (s, default 600), GPU_BENCH_TIMEOUT (300),
#   GPU_BENCH_REPEAT (3), GPU_BENCH_LIMIT (samples, 60000), GPU_BUILD_TIMEOUT (900)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
T_TEST=${GPU_TEST_TIMEOUT:-600}
T_BENCH=${GPU_BENCH_TIMEOUT:-300}
T_BUILD=${GPU_BUILD_TIMEOUT:-900}
mkdir -p "$BUILD"
LOG="$BUILD/gpu-run.log"
: > "$LOG"
SUMMARY=""
FAILED=0
T0=$(date +%s)

say() { echo "== $*" | tee -a "$LOG"; }
step_result() { # name status seconds
  SUMMARY="$SUMMARY$(printf '%-10s %-6s %5ss' "$1" "$2" "$3")
"
  [ "$2" = ok ] || FAILED=1
}

say "machine: $(uname -srm), $JOBS cores"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader \
    2>&1 | tee -a "$LOG"
else
  say "nvidia-smi not found"
fi
PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 &&
     "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
if [ -n "$PY" ]; then
  TORCH=$("$PY" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>&1)
  say "PyTorch: $TORCH ($PY)"
else
  PY=python3
  say "PyTorch: not found (the benchmark shows Ember alone; the registry-reading tests skip)"
fi

# 1-2. configure and build
s=$(date +%s)
if [ -f "$BUILD/build.ninja" ]; then
  say "reconfiguring $BUILD with -Dcuda=enabled"
  meson configure "$BUILD" -Dcuda=enabled >>"$LOG" 2>&1
  cfg=$?
else
  say "configuring $BUILD with -Dcuda=enabled"
  meson setup "$BUILD" "$ROOT" -Dcuda=enabled -Dgui=disabled >>"$LOG" 2>&1
  cfg=$?
fi
if [ $cfg -eq 0 ]; then
  say "building ($JOBS jobs)"
  timeout "$T_BUILD" ninja -C "$BUILD" -j "$JOBS" >>"$LOG" 2>&1
  cfg=$?
fi
if [ $cfg -ne 0 ]; then
  step_result build FAILED $(( $(date +%s) - s ))
  tail -40 "$LOG"
  printf '\nsummary (log: %s)\n%s' "$LOG" "$SUMMARY"
  exit 1
fi
step_result build ok $(( $(date +%s) - s ))
"$BUILD/app/ember" devices | tee -a "$LOG"

# 3. the gpu suite
s=$(date +%s)
say "meson test --suite gpu"
timeout "$T_TEST" meson test -C "$BUILD" --suite gpu --num-processes 1 --print-errorlogs \
  >>"$LOG" 2>&1
rc=$?
grep -E '^ *[0-9]+/[0-9]+ ' "$LOG" | tail -20
skips=$(grep -cE '^ *[0-9]+/[0-9]+ .* SKIP ' "$LOG")
if [ $rc -eq 0 ] && [ "$skips" -eq 0 ]; then st=ok
elif [ $rc -eq 0 ]; then st=SKIPPED
elif [ $rc -eq 124 ]; then st=TIMEOUT
else st=FAILED; fi
step_result "gpu suite" "$st" $(( $(date +%s) - s ))

# 4. the benchmark
s=$(date +%s)
say "benchmark (tests/bench/bench_gpu.py)"
timeout "$T_BENCH" "$PY" "$ROOT/tests/bench/bench_gpu.py" --build "$BUILD" \
  --repeat "${GPU_BENCH_REPEAT:-3}" --limit "${GPU_BENCH_LIMIT:-60000}" 2>&1 | tee -a "$LOG"
rc=$?
# tee's status hides the script's: the JSON line is there only when it finished
if tail -1 "$LOG" | grep -q '"results"'; then st=ok
elif tail -1 "$LOG" | grep -q '"skipped"'; then st=SKIPPED
else st=FAILED; fi
step_result benchmark "$st" $(( $(date +%s) - s ))

printf '\nsummary (%ss in all; log: %s)\n%s' $(( $(date +%s) - T0 )) "$LOG" "$SUMMARY"
exit $FAILED
