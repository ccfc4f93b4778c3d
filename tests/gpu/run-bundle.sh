#!/bin/sh
# tests/gpu/run-bundle.sh: on a GPU machine without Debian's packages, runs
# what tests/gpu/pack.sh packed here (.gpu-bundle/bundle.tar.xz): the C
# tests of suite gpu on cuda:0, tests/gpu/test_train_gpu.py (training on
# the GPU against the CPU, AMP convergence, out of memory) and the GPU
# benchmark (tests/bench/bench_gpu.py: fmnist-cnn samples/s in f32 and
# bf16, beside PyTorch on the same GPU). Each step has a time bound; a
# summary ends the output and the log goes to $OUT/gpu-run.log when OUT
# is set (the device tool's folder that comes back). Exit 0 when every
# step passed (a skip counts as a failure: this exists to run them).
#
# usage: tests/gpu/run-bundle.sh   (from the repository root or anywhere)
# environment: GPU_STEP_TIMEOUT (s per test step, default 240),
#   GPU_BENCH_TIMEOUT (240), GPU_BENCH_REPEAT (3), GPU_BENCH_LIMIT (20000)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=/tmp/ember-gpu-bundle
LOG=${OUT:-/tmp}/gpu-run.log
: > "$LOG"
T_STEP=${GPU_STEP_TIMEOUT:-240}
SUMMARY=""
FAILED=0
say() { echo "== $*" | tee -a "$LOG"; }
result() { # name status seconds
  SUMMARY="$SUMMARY$(printf '%-24s %-8s %5ss' "$1" "$2" "$3")
"
  [ "$2" = ok ] || FAILED=1
}

BUNDLE=$ROOT/.gpu-bundle/bundle.tar.xz
[ -f "$BUNDLE" ] || { echo "no bundle: run tests/gpu/pack.sh where it was built"; exit 1; }
rm -rf "$B" && mkdir -p "$B"
# tar needs xz for -J; python3's tarfile reads it without
tar -C "$B" -xJf "$BUNDLE" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$BUNDLE" "$B" || { echo "cannot unpack $BUNDLE"; exit 1; }
say "bundle of commit $(cat "$B/COMMIT" 2>/dev/null); machine $(uname -srm), $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader \
  2>&1 | tee -a "$LOG"

# The CUDA libraries the bundle leaves out: the toolkit's, else PyTorch's wheels.
CUDALIB=""
for name in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13; do
  d=$(find -H /usr/local/cuda/lib64 /usr/local/cuda/targets /opt /usr/lib /usr/local/lib \
        -name "$name" 2>/dev/null | head -1)
  if [ -n "$d" ]; then CUDALIB="$CUDALIB:$(dirname "$d")"; else say "not found: $name"; fi
done
# Only the bundle's programs see its libraries (python3 and PyTorch keep
# the machine's own): a wrapper for ember, env for the C tests.
LIBS="$B/lib$CUDALIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "libraries: $LIBS"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$B/bin/ember" > "$B/bin/ember-run"
chmod +x "$B/bin/ember-run"

# The tests read Fashion-MNIST from Debian's folder (the whole set, where
# the package is installed, is left alone).
FM=/usr/share/datasets/fashion-mnist
if [ ! -f "$FM/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$FM" 2>/dev/null && cp "$B"/data/*.gz "$FM/" ||
    say "cannot write $FM: the data checks will skip"
fi

EMBER=$B/bin/ember-run
"$EMBER" devices 2>&1 | tee -a "$LOG"
export EMBER_SOURCE_ROOT="$ROOT" EMBER_BUILD_ROOT="$B" G_DEBUG=fatal-criticals

step() { # name command...
  name=$1
  shift
  s=$(date +%s)
  say "$name: $*"
  timeout "$T_STEP" "$@" >>"$LOG" 2>&1
  rc=$?
  case $rc in
  0) st=ok ;;
  77) st=SKIPPED ;;
  124) st=TIMEOUT ;;
  *) st="FAIL($rc)" ;;
  esac
  tail -25 "$LOG"
  result "$name" "$st" $(( $(date +%s) - s ))
}

step test-cuda-alloc env LD_LIBRARY_PATH="$LIBS" "$B/bin/test-cuda-alloc"
step test-device-ops env LD_LIBRARY_PATH="$LIBS" EMBER_TEST_DEVICE=cuda "$B/bin/test-device-ops"
step test-train-device-api env LD_LIBRARY_PATH="$LIBS" EMBER_TEST_DEVICE=cuda \
  "$B/bin/test-train-device-api"
step train-gpu python3 -u "$ROOT/tests/gpu/test_train_gpu.py" "$EMBER" "$ROOT"

s=$(date +%s)
say "benchmark"
PYTHONUNBUFFERED=1 timeout "${GPU_BENCH_TIMEOUT:-240}" python3 "$ROOT/tests/bench/bench_gpu.py" \
  --ember "$EMBER" --repeat "${GPU_BENCH_REPEAT:-3}" --limit "${GPU_BENCH_LIMIT:-20000}" \
  >>"$LOG" 2>&1
tail -8 "$LOG"
if tail -1 "$LOG" | grep -q '"results"'; then st=ok
elif tail -1 "$LOG" | grep -q '"skipped"'; then st=SKIPPED
else st=FAILED; fi
result benchmark "$st" $(( $(date +%s) - s ))

printf '\nsummary (log: %s)\n%s' "$LOG" "$SUMMARY" | tee -a "$LOG"
exit $FAILED
