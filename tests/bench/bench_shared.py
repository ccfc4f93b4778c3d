"""Two trainings at once on the same cores, Ember against PyTorch.

A workbench user starts a second experiment while the first runs: both
processes then want every core. This runs fmnist-mlp for one epoch,
2 threads each, alone and as two processes started together, for Ember
(`ember train`) and for PyTorch as a user runs it by default
(tests/bench/bench_torch.py --mode default), interleaved and repeated.
It prints the median samples/s of one process alone, of each of the two
together and of the pair in total, and the pair's total as a fraction of
one alone (1.0: sharing costs nothing; 0.5: the two together get half of
what one got alone).

usage: /usr/bin/python3 tests/bench/bench_shared.py [--build build]
         [--repeat 3] [--spec data/models/fmnist-mlp.json] [--limit N]
         [--native-blas]

--native-blas and the BLAS core every contender gets are as in
bench_train.py; the core PyTorch ran is printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_train import blas_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


ENV = {}


def last_json(p, cmd):
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), err[-2000:]))
    return json.loads(out.strip().splitlines()[-1])


def together(cmds, key):
    """Starts every command at once; their samples/s."""
    ps = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
          for c in cmds]
    return [last_json(p, c) for p, c in zip(ps, cmds)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spec", default=os.path.join(ROOT, "data", "models", "fmnist-mlp.json"))
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--native-blas", action="store_true")
    a = ap.parse_args()
    ENV.update(blas_env(os.path.join(a.build, "app", "ember"), a.native_blas))
    lim = ["--limit", str(a.limit)] if a.limit else []
    contenders = {
        "ember": ([os.path.join(a.build, "app", "ember"), "train", a.spec, "--epochs", "1",
                   "--threads", "2", "--quiet", "--no-record"] + lim, "train_samples_per_sec"),
        "torch-default": ([sys.executable, os.path.join(HERE, "bench_torch.py"), a.spec,
                           "--mode", "default", "--threads", "2"] + lim, "samples_per_sec"),
    }
    alone = {k: [] for k in contenders}
    each = {k: [] for k in contenders}
    total = {k: [] for k in contenders}
    core = "?"
    for _ in range(a.repeat):
        for name, (cmd, key) in contenders.items():
            one = together([cmd], key)[0]
            alone[name].append(one[key])
            core = one.get("blas_core", core) if name != "ember" else core
            pair = [r[key] for r in together([cmd, cmd], key)]
            each[name] += pair
            total[name].append(sum(pair))
    print("%s, one epoch, 2 threads per process, %d rounds (PyTorch's BLAS core %s):" %
          (os.path.basename(a.spec), a.repeat, core))
    rows = {}
    for name in contenders:
        m_alone, m_each, m_total = (statistics.median(alone[name]), statistics.median(each[name]),
                                    statistics.median(total[name]))
        share = statistics.median([t / s for t, s in zip(total[name], alone[name])])
        print("  %-14s alone %8.0f samples/s; two at once %8.0f each, %8.0f together "
              "(%.2f of alone)" % (name, m_alone, m_each, m_total, share))
        rows[name] = {"alone": m_alone, "each": m_each, "together": m_total, "share": share}
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
