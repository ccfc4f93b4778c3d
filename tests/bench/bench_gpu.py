"""Training speed on the GPU: Ember against PyTorch on the same GPU.

fmnist-cnn (conv32-pool-conv64-pool-fc128-fc10), batch 128, Adam 1e-3,
one epoch of Fashion-MNIST (--limit N samples), in f32 and in bf16
autocast, repeated and interleaved:
  - Ember: `ember train fmnist-cnn.json --device cuda --amp off|bf16`,
    its JSON summary's train_samples_per_sec (the training loop only:
    evaluation and process start excluded; each batch comes from the data
    loader in host memory and is copied to the GPU, as a user's run does);
  - PyTorch: the same model, optimiser and batch size with the whole
    training set preloaded on the GPU, shuffled there each epoch, bf16 by
    torch.autocast(device_type="cuda", dtype=torch.bfloat16); PyTorch's
    defaults otherwise (cudnn.benchmark off, TF32 as it ships). Its clock
    covers the epoch after 5 untimed warm-up steps, with a synchronize at
    both ends.
It prints the median samples/s of each, the ratio Ember / PyTorch per
precision (per pair and median) and a JSON line last. Without a CUDA
device (as `ember devices --json` says) it prints why and exits 0;
without PyTorch (or PyTorch without CUDA) it prints Ember's figures only.

usage: python3 tests/bench/bench_gpu.py [--build build | --ember EXE] [--repeat 3]
         [--limit 60000] [--amp off,bf16]
(the PyTorch side needs a python3 with torch: run the script with it)
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FMNIST = "/usr/share/datasets/fashion-mnist"
SPEC = os.path.join(ROOT, "data", "models", "fmnist-cnn.json")


def run_json(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- the PyTorch side (run in a child: --torch-worker) ----------------------------
def idx_images(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    n, h, w = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, h, w)


def idx_labels(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, dtype=np.uint8, offset=8)


def torch_worker(amp, limit):
    import torch
    import torch.nn as nn
    if not torch.cuda.is_available():
        print(json.dumps({"error": "PyTorch has no CUDA device"}))
        return
    dev = torch.device("cuda")
    x = idx_images(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))[:limit]
    y = idx_labels(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"))[:limit]
    # Ember's IDX loader scales to [0, 1]; the same here, preloaded on the GPU
    xs = torch.from_numpy(x.copy()).to(dev).float().div_(255.0)
    ys = torch.from_numpy(y.astype("int64")).to(dev)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    batch = 128

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        if amp == "bf16":
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(xb), yb)
        else:
            loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    for i in range(5):  # warm-up: cuDNN and cuBLAS handles, allocator
        step(xs[i * batch:(i + 1) * batch], ys[i * batch:(i + 1) * batch])
    torch.cuda.synchronize()
    n = xs.shape[0]
    t0 = time.perf_counter()
    perm = torch.randperm(n, device=dev)
    for b in range(0, n, batch):
        idx = perm[b:b + batch]
        loss = step(xs[idx], ys[idx])
        loss.item()  # Ember reads every step's loss back too
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"samples_per_sec": n / dt, "seconds": dt, "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0)}))


def have_torch_cuda():
    p = subprocess.run([sys.executable, "-c",
                        "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                       capture_output=True, text=True)
    if p.returncode == 0:
        return True, ""
    return False, ("PyTorch has no CUDA device" if p.returncode == 3
                   else "no PyTorch in %s" % sys.executable)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ember", default=None, help="the ember program (default BUILD/app/ember)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=int, default=60000)
    ap.add_argument("--amp", default="off,bf16")
    ap.add_argument("--torch-worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        torch_worker(a.torch_worker, a.limit)
        return 0
    ember = a.ember or os.path.join(a.build, "app", "ember")
    devs = run_json([ember, "devices", "--json"])
    cuda = [d for d in devs["devices"] if d["kind"] == "cuda"]
    if not cuda:
        why = [u["reason"] for u in devs["unavailable"] if u["kind"] == "cuda"]
        print("skip: no CUDA device (%s)" % (why[0] if why else "none listed"))
        print(json.dumps({"skipped": True}))
        return 0
    torch_ok, why = have_torch_cuda()
    print("GPU: %s (compute %s, %.0f GiB); PyTorch: %s" % (
        cuda[0]["name"], cuda[0]["compute_capability"], cuda[0]["total_bytes"] / 2**30,
        "yes" if torch_ok else why))
    print("fmnist-cnn, %d samples, batch 128, Adam 1e-3, %d repeats (medians)" %
          (a.limit, a.repeat))
    rows = []
    for amp in a.amp.split(","):
        em, th = [], []
        for _ in range(a.repeat):
            e = run_json([ember, "train", SPEC, "--device", "cuda", "--amp", amp, "--epochs", "1",
                          "--batch", "128", "--limit", str(a.limit), "--quiet", "--no-record"])
            em.append(e["train_samples_per_sec"])
            if torch_ok:
                t = run_json([sys.executable, os.path.abspath(__file__), "--torch-worker", amp,
                              "--limit", str(a.limit)])
                th.append(t["samples_per_sec"])
        row = {"amp": amp, "ember": statistics.median(em), "ember_runs": em}
        line = "  %-4s ember %9.0f samples/s (runs %s)" % (
            amp, row["ember"], ", ".join("%.0f" % v for v in em))
        if th:
            ratios = [x / y for x, y in zip(em, th)]
            row.update({"torch": statistics.median(th), "torch_runs": th,
                        "ratio": statistics.median(ratios)})
            line += "   torch %9.0f samples/s (runs %s)   ember/torch %.2fx (pairs %s)" % (
                row["torch"], ", ".join("%.0f" % v for v in th), row["ratio"],
                ", ".join("%.2f" % r for r in ratios))
        print(line)
        rows.append(row)
    print(json.dumps({"gpu": cuda[0]["name"], "torch": torch_ok, "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
