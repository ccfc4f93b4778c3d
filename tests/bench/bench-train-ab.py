#!/usr/bin/python3
"""bench-train-ab.py: two builds of `ember train` on the same model, runs
alternated (A B A B ...) so that the machine's drift hits both alike; the
median train_samples_per_sec of each, their ratio B/A, and which kernels
each ran (cpu_isa, cpu_kernels, blas_core from the JSON line). For a
"no slowdown" claim between two commits: build each (meson setup DIR &&
ninja -C DIR app/ember) and give both binaries.

usage: bench-train-ab.py EMBER_A EMBER_B SPEC [--pairs 5] [--limit N] [--epochs 1] [--threads 2]
"""
import argparse
import json
import statistics
import subprocess


def run(ember, spec, limit, threads, epochs=1):
    p = subprocess.run([ember, "train", spec, "--epochs", str(epochs), "--no-record", "--quiet",
                        "--threads", str(threads), "--limit", str(limit)],
                       capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise SystemExit("%s train: %s" % (ember, p.stderr[-2000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("spec")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--limit", type=int, default=60000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    o = ap.parse_args()
    rates = {"a": [], "b": []}
    info = {}
    run(o.a, o.spec, min(o.limit, 2000), o.threads)  # warm the page cache and the data
    for i in range(o.pairs):
        for k, exe in (("a", o.a), ("b", o.b)):
            r = run(exe, o.spec, o.limit, o.threads, o.epochs)
            rates[k].append(r["train_samples_per_sec"])
            info[k] = "%s kernels, processor %s, BLAS %s" % (r.get("cpu_kernels"),
                                                            r.get("cpu_isa"), r.get("blas_core"))
            print("pair %d %s %10.1f samples/s" % (i + 1, k.upper(), rates[k][-1]), flush=True)
    ma, mb = statistics.median(rates["a"]), statistics.median(rates["b"])
    ratios = [b / a for a, b in zip(rates["a"], rates["b"])]
    print("A %s: median %.1f samples/s (%s)" % (o.a, ma, info["a"]))
    print("B %s: median %.1f samples/s (%s)" % (o.b, mb, info["b"]))
    print("B/A: ratio of medians %.3f, median of pair ratios %.3f (min %.3f, max %.3f)" % (
        mb / ma, statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
