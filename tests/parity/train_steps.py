"""Ember's training steps against PyTorch's, from the same initial weights.

Runs `ember train` with no shuffling for a given number of steps, then the
same steps in PyTorch 1.13 on the same Fashion-MNIST samples, and compares
every weight. Exit 0 on agreement, 1 on a mismatch, 77 (skip) when torch or
the dataset is missing.

usage: train_steps.py EMBER SPEC --steps N --batch B --optimizer sgd|adam
                      --lr X [--momentum X] [--tol X]
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "common"))

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not available: skipping")
    sys.exit(77)

import safetensors_io  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path, n):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[:4], "big")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(magic & 0xFF)]
    off = 4 + 4 * len(dims)
    count = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    arr = np.frombuffer(raw, dtype=np.uint8, count=n * count, offset=off)
    return arr.reshape([n] + dims[1:])


def torch_model(spec, state):
    """The spec's layers as a function of the weights (plain sequential)."""
    def forward(x):
        for node in spec["nodes"]:
            t, name = node["type"], node["name"]
            if t == "Flatten":
                x = x.flatten(1)
            elif t == "Linear":
                x = F.linear(x, state[name + ".weight"], state.get(name + ".bias"))
            elif t == "Conv2d":
                x = F.conv2d(x, state[name + ".weight"], state.get(name + ".bias"),
                             padding=node.get("padding", 0), stride=node.get("stride", 1))
            elif t == "ReLU":
                x = F.relu(x)
            elif t == "MaxPool2d":
                x = F.max_pool2d(x, node["kernel_size"])
            else:
                raise SystemExit("train_steps.py does not know layer type " + t)
        return x
    return forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ember")
    ap.add_argument("spec")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("Fashion-MNIST is not installed: skipping")
        sys.exit(77)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    with open(a.spec) as f:
        spec = json.load(f)

    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init.safetensors")
        after = os.path.join(tmp, "after.safetensors")
        n = a.steps * a.batch
        common = [a.ember, "train", a.spec, "--seed", "7", "--quiet", "--threads", "1"]
        subprocess.run(common + ["--epochs", "0", "--save", init], check=True)
        flags = ["--epochs", "1", "--limit", str(n), "--batch", str(a.batch), "--no-shuffle",
                 "--optimizer", a.optimizer, "--lr", repr(a.lr), "--init", init,
                 "--save", after, "--workers", "0"]
        if a.optimizer == "sgd":
            flags += ["--momentum", repr(a.momentum)]
        out = subprocess.run(common + flags, check=True, capture_output=True, text=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if result["steps"] != a.steps:
            print("ember ran %d steps, expected %d" % (result["steps"], a.steps))
            return 1
        w0 = safetensors_io.load(init)
        ours = safetensors_io.load(after)

    images = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"), n)
    labels = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"), n)
    x_all = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(n, 1, 28, 28)
    y_all = torch.from_numpy(labels.astype(np.int64))

    params = {k: v.clone().requires_grad_(True) for k, v in w0.items()}
    order = [k for k in w0.keys()]
    plist = [params[k] for k in order]
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(plist, lr=a.lr, momentum=a.momentum)
    elif a.optimizer == "adam":
        opt = torch.optim.Adam(plist, lr=a.lr)
    else:
        opt = torch.optim.AdamW(plist, lr=a.lr)
    fwd = torch_model(spec, params)
    for s in range(a.steps):
        xb = x_all[s * a.batch:(s + 1) * a.batch]
        yb = y_all[s * a.batch:(s + 1) * a.batch]
        opt.zero_grad()
        loss = F.cross_entropy(fwd(xb), yb)
        loss.backward()
        opt.step()

    worst = 0.0
    for k in order:
        d = (ours[k] - params[k].detach()).abs().max().item()
        moved = (params[k].detach() - w0[k]).abs().max().item()
        print("%-14s max |ember - torch| = %.3g   (moved %.3g from init)" % (k, d, moved))
        worst = max(worst, d)
    print("worst difference after %d %s steps: %.3g (tolerance %.1g)" % (a.steps, a.optimizer, worst, a.tol))
    return 0 if worst <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
