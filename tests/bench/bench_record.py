"""What recording a run into the registry costs the training loop.

Runs `ember train data/models/fmnist-mlp.json --epochs 1` on the full
Fashion-MNIST training set, alternating a recorded run (into a throwaway
registry: --registry TMP) and one with --no-record, N times each (5 by
default), and prints:

- the median training throughput (samples/s) of each and their ratio:
  the end-to-end cost, which includes the checkpoints a recorded run
  writes (one at the evaluation, one at the end) and is within the noise
  of a shared machine;
- record_enqueue_s / train_seconds from the recorded runs' JSON lines:
  the time the trainer's thread itself spent handing rows to the store
  writer (the only recording work done in that thread), with
  record_commit_s, the SQLite time spent in the writer's own thread.

Target: recording costs the training loop under 2%.

usage: python3 tests/bench/bench_record.py [--build build] [--repeat 5]
         [--threads 2] [--epochs 1] [--limit N]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_json(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    ember = os.path.join(a.build, "app", "ember")
    spec = os.path.join(ROOT, "data", "models", "fmnist-mlp.json")
    reg = tempfile.mkdtemp(prefix="ember-bench-record-")
    env = dict(os.environ)
    env["EMBER_HOME"] = reg  # never the user's registry, whatever happens
    base = [ember, "train", spec, "--epochs", str(a.epochs), "--threads", str(a.threads),
            "--quiet"] + (["--limit", str(a.limit)] if a.limit else [])
    recorded_cmd = base + ["--registry", reg]
    plain_cmd = base + ["--no-record"]
    rec, plain = [], []
    try:
        run_json(plain_cmd, env)  # warm the page cache and the BLAS kernel choice
        for _ in range(a.repeat):  # alternating, so drift hits both alike
            rec.append(run_json(recorded_cmd, env))
            plain.append(run_json(plain_cmd, env))
    finally:
        shutil.rmtree(reg, ignore_errors=True)

    sps_rec = [r["train_samples_per_sec"] for r in rec]
    sps_plain = [r["train_samples_per_sec"] for r in plain]
    enq = [r["record_enqueue_s"] / r["train_seconds"] for r in rec]
    commit = [r["record_commit_s"] for r in rec]
    m_rec, m_plain = statistics.median(sps_rec), statistics.median(sps_plain)
    ratio = m_rec / m_plain
    print("commands (alternating, %d each):" % a.repeat)
    print("  recorded:   " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                                      for c in recorded_cmd).replace(reg, "$TMP"))
    print("  not recorded: " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                                        for c in plain_cmd))
    print()
    print("  %-14s %12s   %s" % ("", "samples/s", "runs"))
    print("  %-14s %12.0f   %s" % ("recorded", m_rec, ", ".join("%.0f" % v for v in sps_rec)))
    print("  %-14s %12.0f   %s" % ("not recorded", m_plain,
                                   ", ".join("%.0f" % v for v in sps_plain)))
    print("  %-14s %12.3f   (1 - ratio = %.1f%% end to end, noise included)" % (
        "ratio", ratio, 100 * (1 - ratio)))
    print("  %-14s %11.3f%%   of the trainer thread's time spent enqueueing rows "
          "(median; max %.3f%%)" % ("enqueue", 100 * statistics.median(enq), 100 * max(enq)))
    print("  %-14s %11.3fs   SQLite commit time in the writer thread (median per run)" % (
        "commit", statistics.median(commit)))
    steps = rec[0]["steps"]
    print("  rows per run: %d steps x 6 metrics (loss, lr, grad_norm, 3 memory figures) + per epoch and evaluation 4" % steps)
    print(json.dumps({"median_samples_per_sec": {"recorded": m_rec, "not_recorded": m_plain},
                      "ratio": ratio, "enqueue_fraction": statistics.median(enq),
                      "commit_seconds": statistics.median(commit)}))


if __name__ == "__main__":
    main()
