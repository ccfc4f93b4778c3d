"""bench-quant.py: int8 inference against f32, in Ember and in PyTorch, in
one run: fmnist-mlp's forward at batch 1 (latency) and 128 / 256
(throughput), medians over repetitions, ratios printed.

Ember's numbers come from bench-quant (the C side: em_model_forward in
no-grad mode, f32 then em_model_quantize int8 with each kernel the CPU
runs), once per instruction-set level the processor runs
(EMBER_CPU_ISA=generic, avx2, avx512, avx512_bf16, ...: one machine
times the kernels an AVX2-only or AVX-512-without-VNNI processor would
run), each table headed by the f32 kernel set and the int8 kernel that
ran; PyTorch's from the same architecture in f32 and after
torch.ao.quantization.quantize_dynamic (qint8, on the quantised engine
this torch build has: fbgemm or onednn; it prints which), both under
torch.inference_mode() with the same thread count, timed once (the caps
do not apply to it).

usage: /usr/bin/python3 tests/bench/bench-quant.py BENCH_QUANT SPEC [THREADS [REPS [cpu|wall [CAPS]]]]

CAPS: "all" (the default: no cap, then every level up to the processor's),
"none" (no cap only), or levels by commas ("avx2,avx512").

With "cpu" both sides time the calling thread's CPU time (use it with
THREADS 1 on a machine shared with other jobs: it measures the work, not
the time the scheduler gave others; wall-clock numbers with OpenMP or
pool threads on an oversubscribed machine mean little).
"""
import json
import os
import statistics
import subprocess
import sys
import time

import torch

BATCHES = (1, 128, 256)
LEVELS = ("generic", "avx2", "avx512", "avx512_bf16", "amx")


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


def run_ember(exe, spec, threads, reps, mode, cap):
    """bench-quant under EMBER_CPU_ISA=cap (None: no cap): (info, rows)."""
    env = dict(os.environ)
    env.pop("EMBER_CPU_ISA", None)
    if cap:
        env["EMBER_CPU_ISA"] = cap
    out = subprocess.run([exe, spec, str(threads), str(reps), mode], capture_output=True,
                         text=True, check=True, env=env).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    info = next((r for r in lines if "cpu_kernels" in r), {})
    return info, [r for r in lines if "mode" in r]


def print_table(cap, info, rows, tt):
    ember = {(r["kernel"], r["batch"]): r["ms"] for r in rows}
    best = next(r["kernel"] for r in rows if r["mode"] == "int8" and r["default"])
    print("\n== EMBER_CPU_ISA=%s: level %s, f32 kernels %s, int8 kernel %s (%s)" % (
        cap or "(none)", info.get("cpu_isa", "?"), info.get("cpu_kernels", "?"), best,
        info.get("describe", "?")))
    print("%-6s %12s %12s %8s %12s %12s %8s %10s" % (
        "batch", "ember f32", "ember int8", "speedup", "torch f32", "torch int8", "speedup",
        "int8 e/t"))
    for n in BATCHES:
        if ("f32", n) not in ember or (best, n) not in ember:
            continue
        ef, eq = ember[("f32", n)], ember[(best, n)]
        tf, tq = tt[("f32", n)], tt[("int8", n)]
        unit = "us" if n == 1 else "ms"
        s = 1e3 if n == 1 else 1.0
        print("%-6d %9.3f %s %9.3f %s %7.2fx %9.3f %s %9.3f %s %7.2fx %9.2fx" % (
            n, ef * s, unit, eq * s, unit, ef / eq, tf * s, unit, tq * s, unit, tf / tq, tq / eq))
    print("throughput (samples/s):")
    for n in BATCHES[1:]:
        if ("f32", n) in ember and (best, n) in ember:
            print("  batch %d: ember f32 %.0f, ember int8 %.0f; torch f32 %.0f, torch int8 %.0f" % (
                n, n / ember[("f32", n)] * 1e3, n / ember[(best, n)] * 1e3,
                n / tt[("f32", n)] * 1e3, n / tt[("int8", n)] * 1e3))
    others = sorted({k for k, _ in ember} - {"f32", best})
    for k in others:
        print("ember int8 with the %s kernel: %s" % (k, ", ".join(
            "batch %d %.3f ms" % (n, ember[(k, n)]) for n in BATCHES if (k, n) in ember)))
    return ember, best


def main():
    exe, spec = sys.argv[1:3]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 31
    mode = sys.argv[5] if len(sys.argv) > 5 else "wall"
    caps_arg = sys.argv[6] if len(sys.argv) > 6 else "all"
    clock = time.thread_time if mode == "cpu" else time.perf_counter

    runs = [(None,) + run_ember(exe, spec, threads, reps, mode, None)]
    if caps_arg == "all":
        top = runs[0][1].get("cpu_isa", "generic")
        caps = LEVELS[:LEVELS.index(top) + 1] if top in LEVELS else ()
    elif caps_arg == "none":
        caps = ()
    else:
        caps = tuple(c for c in caps_arg.split(",") if c)
    for cap in caps:
        runs.append((cap,) + run_ember(exe, spec, threads, reps, mode, cap))

    torch.set_num_threads(threads)
    f32 = torch_model()
    q8 = torch.ao.quantization.quantize_dynamic(f32, {torch.nn.Linear}, dtype=torch.qint8)
    tt = {(k, n): time_torch(m, n, reps, clock) for k, m in (("f32", f32), ("int8", q8))
          for n in BATCHES}

    print("fmnist-mlp forward (784-256-128-10), %d threads, %s time, median of %d; "
          "torch %s (%s)" % (threads, mode, reps, torch.__version__,
                             torch.backends.quantized.engine))
    summary = []
    for cap, info, rows in runs:
        ember, best = print_table(cap, info, rows, tt)
        b1 = ember.get(("f32", 1))
        q = [ember.get(("f32", 128)), ember.get((best, 128))]
        summary.append((cap or "(none)", info.get("cpu_kernels", "?"), best, b1,
                        q[0] / q[1] if None not in q else float("nan")))
    print("\nsummary: cap, f32 kernels, int8 kernel, f32 batch-1 latency, int8 speed-up at batch 128")
    for cap, fk, best, b1, r in summary:
        print("  %-12s %-8s %-12s %8.1f us %6.2fx" % (cap, fk, best, b1 * 1e3, r))
    print("('int8 e/t' = torch int8 time / ember int8 time)")


if __name__ == "__main__":
    main()
