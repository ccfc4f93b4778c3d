#!/usr/bin/env python3
"""bench-ddp.py: data-parallel scaling on this machine (Open MPI, CPU).

For fmnist-mlp and fmnist-cnn on Fashion-MNIST, one epoch of --limit
samples at a global batch of 128:
- 1 rank, batch 128, 2 threads (both cores);
- 2 ranks (mpirun --oversubscribe -np 2), batch 64 each, 1 thread per
  rank (the cores are not oversubscribed), in three modes:
  overlap (buckets start during backward, MPI_Test between tape nodes),
  no-progress (buckets start during backward but nothing calls MPI
  until the step), and after-backward (every bucket starts after
  backward: the all-reduce fully exposed);
- both bucket sizes 1 MB (the default) and 0.25 MB.
Reports the median over --repeat runs of: samples/s (global), and from
the bucketer: bytes all-reduced per step, buckets, backward ms per step,
all-reduce ms per step (first bucket start to last completion), exposed
ms per step (what em_ddp_finish waited), and the fraction of the
all-reduce hidden behind backward = 1 - exposed / exposed(after-backward).

usage: bench-ddp.py EMBER SOURCE_ROOT [--repeat N] [--json FILE] [--models fmnist-mlp,fmnist-cnn]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = {"fmnist-mlp": 12800, "fmnist-cnn": 2560}  # --limit


def run(ember, spec, limit, ranks, batch, threads, env_extra, home):
    cmd = [ember, "train", spec, "--no-record", "--epochs", "1", "--limit", str(limit),
           "--batch", str(batch), "--threads", str(threads), "--seed", "1", "--quiet",
           "--workers", "1"]
    env = dict(os.environ, EMBER_HOME=home, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env_extra)
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] + cmd + \
            ["--ddp"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def median_of(rows, key, sub=None):
    vals = [(r[sub][key] if sub else r[key]) for r in rows if (not sub or sub in r)]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ember")
    ap.add_argument("source")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="ember-bench-ddp-")
    results = []
    for model in a.models.split(","):
        limit = MODELS[model]
        spec = os.path.join(a.source, "data", "models", model + ".json")
        configs = [("1 rank x 2 threads", 1, 128, 2, {})]
        for mb in ("1", "0.25"):
            configs += [
                ("2 ranks, overlap, %s MB" % mb, 2, 64, 1, {"EMBER_DDP_BUCKET_MB": mb}),
                ("2 ranks, no progress, %s MB" % mb, 2, 64, 1,
                 {"EMBER_DDP_BUCKET_MB": mb, "EMBER_DDP_PROGRESS": "0"}),
                ("2 ranks, after backward, %s MB" % mb, 2, 64, 1,
                 {"EMBER_DDP_BUCKET_MB": mb, "EMBER_DDP_OVERLAP": "0"}),
            ]
        exposed_after = {}
        for name, ranks, batch, threads, env in configs:
            rows = [run(a.ember, spec, limit, ranks, batch, threads, env, home)
                    for _ in range(a.repeat)]
            r = {"model": model, "config": name, "ranks": ranks,
                 "samples_per_sec": median_of(rows, "train_samples_per_sec")}
            if ranks > 1:
                for k in ("bytes_per_step", "buckets", "backward_ms_per_step",
                          "allreduce_ms_per_step", "exposed_ms_per_step", "finish_ms_per_step"):
                    r[k] = median_of(rows, k, "ddp")
                mb = env["EMBER_DDP_BUCKET_MB"]
                if "after backward" in name:
                    exposed_after[mb] = r["exposed_ms_per_step"]
            results.append(r)
        for r in results:
            if r["model"] == model and r["ranks"] > 1:
                mb = "1" if "1 MB" in r["config"] else "0.25"
                full = exposed_after.get(mb)
                r["hidden_fraction"] = (1 - r["exposed_ms_per_step"] / full) if full else None
    print("%-11s %-32s %10s %9s %4s %8s %9s %8s %7s" % (
        "model", "config", "samples/s", "MB/step", "bkts", "bwd ms", "allred ms", "expo ms",
        "hidden"))
    for r in results:
        if r["ranks"] == 1:
            print("%-11s %-32s %10.0f" % (r["model"], r["config"], r["samples_per_sec"]))
        else:
            print("%-11s %-32s %10.0f %9.2f %4d %8.3f %9.3f %8.3f %6.0f%%" % (
                r["model"], r["config"], r["samples_per_sec"], r["bytes_per_step"] / 1e6,
                r["buckets"], r["backward_ms_per_step"], r["allreduce_ms_per_step"],
                r["exposed_ms_per_step"], 100 * (r["hidden_fraction"] or 0)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
