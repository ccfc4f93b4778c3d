"""The PyTorch side of the training benchmark: one model, one epoch (or
the first N samples) of Fashion-MNIST preloaded in memory as float
tensors, the same batch size and optimiser as the Ember spec. Prints one
JSON line: samples/s of the training loop, peak RSS, BLAS core.

usage: bench_torch.py SPEC --mode default|cores|best [--limit N] [--threads T]
  default: PyTorch as a user runs it (its own thread count: the physical
           cores it counts, which on some virtual machines is fewer than
           there are)
  cores:   torch.set_num_threads(T): PyTorch's default on a machine where
           it counts T cores (BASELINE.md's "default, 2 threads"),
           OpenBLAS at its own default
  best:    torch.set_num_threads(1), OpenBLAS at T threads (the best
           configuration on 2-core machines: PyTorch's OpenMP pool
           otherwise fights OpenBLAS's threads)
"""
import argparse
import ctypes
import gzip
import json
import os
import resource
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("spec")
ap.add_argument("--mode", choices=["default", "cores", "best"], default="default")
ap.add_argument("--limit", type=int, default=0)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
if a.mode == "best":
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if a.mode == "best":
    torch.set_num_threads(1)
elif a.mode == "cores":
    torch.set_num_threads(a.threads)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def build(spec):
    layers, shape = [], list(spec["input"]["shape"])
    for node in spec["nodes"]:
        t = node["type"]
        if t == "Flatten":
            layers.append(nn.Flatten())
            shape = [int(np.prod(shape))]
        elif t == "Linear":
            layers.append(nn.Linear(shape[0], node["out_features"]))
            shape = [node["out_features"]]
        elif t == "Conv2d":
            k, p = node["kernel_size"], node.get("padding", 0)
            layers.append(nn.Conv2d(shape[0], node["out_channels"], k, padding=p))
            shape = [node["out_channels"], shape[1] + 2 * p - k + 1, shape[2] + 2 * p - k + 1]
        elif t == "ReLU":
            layers.append(nn.ReLU())
        elif t == "MaxPool2d":
            k = node["kernel_size"]
            layers.append(nn.MaxPool2d(k))
            shape = [shape[0], shape[1] // k, shape[2] // k]
        else:
            raise SystemExit("bench_torch.py does not know layer type " + t)
    return nn.Sequential(*layers)


def blas_core():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except OSError:
        return "unknown"


spec = json.load(open(a.spec))
tr = spec["training"]
x = torch.from_numpy(read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)
y = torch.from_numpy(read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int64))
x = x.reshape([-1] + spec["input"]["shape"])
if a.limit:
    x, y = x[:a.limit], y[:a.limit]
torch.manual_seed(0)
model = build(spec)
if tr["optimizer"] == "sgd":
    opt = torch.optim.SGD(model.parameters(), lr=tr["lr"], momentum=tr.get("momentum", 0))
elif tr["optimizer"] == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=tr["lr"])
else:
    opt = torch.optim.AdamW(model.parameters(), lr=tr["lr"])
bs = tr["batch_size"]
n = x.shape[0]
perm = torch.randperm(n)
t0 = time.perf_counter()
for i in range(0, n, bs):
    idx = perm[i:i + bs]
    opt.zero_grad()
    loss = F.cross_entropy(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print(json.dumps({
    "samples_per_sec": n / dt,
    "seconds": dt,
    "final_loss": loss.item(),
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    "torch_threads": torch.get_num_threads(),
    "blas_core": blas_core(),
}))
