#!/usr/bin/env python3
"""test_train_gpu.py: training on a CUDA GPU, end to end (suite 'gpu').

Usage: test_train_gpu.py EMBER_EXE SOURCE_ROOT

Exits 77 (skip) when `ember devices` lists no CUDA device. Checks:
  - the device checks of tests/device/test_train_device.py on cuda:
    fmnist-mlp 20 steps of SGD momentum, Adam, AdamW and SGD with
    clipping against the CPU (losses, gradient norms and final weights
    within 1e-3), amp bf16 close to the CPU's bf16 run, a checkpoint
    stopped on cuda resumed on the CPU and back, eval --device cuda;
  - AMP bf16 convergence: fmnist-cnn, 1 epoch on --limit 10000 (Adam
    1e-3, batch 128): f32 and bf16 both reach test accuracy >= 0.74 (the
    CPU: 0.7722 f32, 0.7689 bf16), and
    bf16 is within 1.5 points of f32;
  - f16 with the dynamic loss scaler: the same run with --amp f16
    --amp-scaler reaches >= 0.74 too, and its final checkpoint's scale is
    a power of two no larger than 65536 (it starts there, halves on each
    overflow and grows only after 2000 clean steps);
  - out of memory on cuda:0, with a model made to exceed the GPU: a
    784 -> 2^20 -> 10 MLP (824 M parameters, 16 MiB of activations per
    sample) at batch 32768 (512 GiB): the pre-flight refuses it naming the
    largest batch that fits; with --no-preflight the step runs out of
    memory and the run stops with the allocator's state (exit 1, recorded
    failed); with --auto-batch it halves until it fits and finishes.
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "device"))
from test_train_device import HAVE_DATA, SKIP, Check, load_safetensors  # noqa: E402

CNN = ["--limit", "10000", "--epochs", "1", "--batch", "128", "--quiet", "--no-record"]


def last_json(p):
    return json.loads(p.stdout.strip().splitlines()[-1])


def cnn_amp(c):
    em = c.em
    res = {}
    for amp in ("off", "bf16", "f16"):
        ck = c.path("ckpt-" + amp)
        args = ["--amp", amp] + (["--amp-scaler"] if amp == "f16" else [])
        p = em.run("train", em.spec("fmnist-cnn.json"), "--device", "cuda", *CNN, *args,
                   "--checkpoint-dir", ck)
        assert p.returncode == 0, p.stderr[-2000:]
        res[amp] = s = last_json(p)
        print("fmnist-cnn %s on cuda: test accuracy %.4f, %.0f samples/s" %
              (amp, s["test_accuracy"], s["train_samples_per_sec"]))
        assert s["test_accuracy"] >= 0.74, (amp, s)
        if amp == "f16":
            final = [f for f in os.listdir(ck) if f.startswith("final-")]
            _, meta = load_safetensors(os.path.join(ck, final[0]))
            scale = float(meta["amp_scale"])
            assert 1 <= scale <= 65536 and math.log2(scale) == int(math.log2(scale)), meta
            print("ok: f16 loss scale at the end %g, %s steps skipped" %
                  (scale, meta.get("amp_skipped")))
    gap = res["off"]["test_accuracy"] - res["bf16"]["test_accuracy"]
    assert gap <= 0.015, "bf16 is %.4f below f32" % gap
    print("ok: amp bf16 within %.4f of f32 (%.4f vs %.4f)" %
          (gap, res["bf16"]["test_accuracy"], res["off"]["test_accuracy"]))


def out_of_memory(c):
    em = c.em
    spec = c.path("huge.json")
    with open(spec, "w") as f:
        json.dump({"name": "huge-mlp", "input": {"shape": [1, 28, 28]},
                   "nodes": [{"name": "flatten", "type": "Flatten"},
                             {"name": "fc1", "type": "Linear", "out_features": 1 << 20},
                             {"name": "relu1", "type": "ReLU"},
                             {"name": "fc2", "type": "Linear", "out_features": 10}],
                   "loss": {"type": "cross_entropy"},
                   "training": {"optimizer": "adam", "lr": 1e-4}}, f)
    base = ["--device", "cuda", "--limit", "40000", "--batch", "32768", "--epochs", "1",
            "--quiet"]
    p = em.run("train", spec, *base)
    assert p.returncode == 1 and "pre-flight" in p.stderr and "--batch" in p.stderr, p.stderr
    print("ok: pre-flight: %s" % p.stderr.strip()[:200])
    p = em.run("train", spec, *base, "--no-preflight")
    assert p.returncode == 1, (p.returncode, p.stderr)
    for word in ("out of memory on cuda:0", "asked", "allocated", "reserved", "--auto-batch"):
        assert word in p.stderr, "'%s' not in: %s" % (word, p.stderr)
    status, message = em.sql("SELECT status, message FROM runs ORDER BY id DESC LIMIT 1")[0]
    assert status == "failed" and "out of memory" in message, (status, message)
    print("ok: out of memory: %s" % p.stderr.strip()[:200])
    p = em.run("train", spec, *base, "--no-preflight", "--auto-batch", "--no-record")
    assert p.returncode == 0, p.stderr[-2000:]
    s = last_json(p)
    assert "going on at batch size" in p.stderr and s["final_batch_size"] < 32768, s
    print("ok: --auto-batch on cuda: finished at batch %d, device peak %.0f MiB" %
          (s["final_batch_size"], s["device_peak_mb"]))


def main():
    exe, source = sys.argv[1], sys.argv[2]
    if not HAVE_DATA:
        print("skip: Fashion-MNIST is not installed")
        return SKIP
    c = Check(exe, source, "cuda")
    j = json.loads(c.em.ok("devices", "--json").stdout)
    if not any(d["kind"] == "cuda" for d in j["devices"]):
        print("skip: no CUDA device: %s" % j["unavailable"])
        return SKIP
    c.devices()
    c.optimisers()
    c.amp()
    c.resume()
    c.evaluate()
    cnn_amp(c)
    out_of_memory(c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
