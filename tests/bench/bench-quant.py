"""bench-quant.py: int8 inference against f32, in Ember and in PyTorch, in
one run: fmnist-mlp's forward at batch 1 (latency) and 128 / 256
(throughput), medians over repetitions, ratios printed.

Ember's numbers come from bench-quant (the C side: em_model_forward in
no-grad mode, f32 then em_model_quantize int8 with each kernel the CPU
runs); PyTorch's from the same architecture in f32 and after
torch.ao.quantization.quantize_dynamic (qint8, on the quantised engine
this torch build has: fbgemm or onednn; it prints which), both under
torch.inference_mode() with the same thread count.

usage: /usr/bin/python3 tests/bench/bench-quant.py BENCH_QUANT SPEC [THREADS [REPS [cpu|wall]]]

With "cpu" both sides time the calling thread's CPU time (use it with
THREADS 1 on a machine shared with other jobs: it measures the work, not
the time the scheduler gave others; wall-clock numbers with OpenMP or
pool threads on an oversubscribed machine mean little).
"""
import json
import statistics
import subprocess
import sys
import time

import torch

BATCHES = (1, 128, 256)


def torch_model():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10)).eval()


def time_torch(model, n, reps, clock):
    x = torch.rand(n, 1, 28, 28)
    calls = 200 if n == 1 else 8
    samples = []
    with torch.inference_mode():
        for r in range(reps + 2):
            t0 = clock()
            for _ in range(calls):
                model(x)
            if r >= 2:
                samples.append((clock() - t0) / calls * 1e3)
    return statistics.median(samples)


def main():
    exe, spec = sys.argv[1:3]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 31
    mode = sys.argv[5] if len(sys.argv) > 5 else "wall"
    clock = time.thread_time if mode == "cpu" else time.perf_counter
    out = subprocess.run([exe, spec, str(threads), str(reps), mode], capture_output=True,
                         text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ember = {(r["kernel"], r["batch"]): r["ms"] for r in rows}
    best = next(r["kernel"] for r in rows if r["mode"] == "int8" and r["default"])

    torch.set_num_threads(threads)
    f32 = torch_model()
    q8 = torch.ao.quantization.quantize_dynamic(f32, {torch.nn.Linear}, dtype=torch.qint8)
    tt = {(k, n): time_torch(m, n, reps, clock) for k, m in (("f32", f32), ("int8", q8))
          for n in BATCHES}

    print("fmnist-mlp forward (784-256-128-10), %d threads, %s time, median of %d; "
          "torch %s (%s)" % (threads, mode, reps, torch.__version__,
                             torch.backends.quantized.engine))
    print("%-6s %12s %12s %8s %12s %12s %8s %10s" % (
        "batch", "ember f32", "ember int8", "speedup", "torch f32", "torch int8", "speedup",
        "int8 e/t"))
    for n in BATCHES:
        ef, eq = ember[("f32", n)], ember[(best, n)]
        tf, tq = tt[("f32", n)], tt[("int8", n)]
        unit = "us" if n == 1 else "ms"
        s = 1e3 if n == 1 else 1.0
        print("%-6d %9.3f %s %9.3f %s %7.2fx %9.3f %s %9.3f %s %7.2fx %9.2fx" % (
            n, ef * s, unit, eq * s, unit, ef / eq, tf * s, unit, tq * s, unit, tf / tq, tq / eq))
    print("throughput (samples/s):")
    for n in BATCHES[1:]:
        print("  batch %d: ember f32 %.0f, ember int8 %.0f; torch f32 %.0f, torch int8 %.0f" % (
            n, n / ember[("f32", n)] * 1e3, n / ember[(best, n)] * 1e3,
            n / tt[("f32", n)] * 1e3, n / tt[("int8", n)] * 1e3))
    others = sorted({k for k, _ in ember} - {"f32", best})
    for k in others:
        print("ember int8 with the %s kernel: %s" % (k, ", ".join(
            "batch %d %.3f ms" % (n, ember[(k, n)]) for n in BATCHES if (k, n) in ember)))
    print("(int8 kernel: %s; 'int8 e/t' = torch int8 time / ember int8 time)" % best)


if __name__ == "__main__":
    main()
