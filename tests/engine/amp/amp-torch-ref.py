"""amp-torch-ref.py DIR R,N,D,K: checks the engine's bf16 rounding and an
autocast Linear layer against PyTorch (see test-amp-torch.c). Exit 77
when torch cannot be imported."""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

d = sys.argv[1]
R, N, D, K = map(int, sys.argv[2].split(","))


def raw(name, dtype):
    return np.fromfile(os.path.join(d, name + ".bin"), dtype=dtype)


def load(name, *shape):
    return torch.from_numpy(raw(name, "<f4").reshape(shape))


failures = []

# ---- rounding: bit for bit, any NaN for a NaN --------------------------------
rin = raw("rin", "<u4").astype(np.int64)
ours = raw("rout", "<u2").astype(np.int64)
f = torch.from_numpy(rin.astype(np.uint32).view(np.float32).copy())
for label, t in (("vector", f), ("scalar", None)):
    if t is None:  # element by element: torch's scalar conversion path
        theirs = np.array([f[i : i + 1].to(torch.bfloat16).view(torch.int16).item() & 0xFFFF
                           for i in range(64)], dtype=np.int64)
        o, src = ours[:64], rin[:64]
    else:
        theirs = t.to(torch.bfloat16).view(torch.int16).numpy().astype(np.int64) & 0xFFFF
        o, src = ours, rin
    is_nan = lambda h: ((h & 0x7F80) == 0x7F80) & ((h & 0x7F) != 0)
    bad = np.nonzero(~((o == theirs) | (is_nan(o) & is_nan(theirs))))[0]
    if len(bad):
        i = bad[0]
        failures.append(f"rounding ({label}): {len(bad)} differ, e.g. 0x{src[i]:08x} -> "
                        f"ours 0x{o[i]:04x}, torch 0x{theirs[i]:04x}")
print(f"rounding: {R} values bit for bit (NaN as NaN)")

# ---- the Linear layer ----------------------------------------------------------
x, w, b, gy = load("x", N, D), load("w", K, D), load("b", K), load("gy", N, K)
y, dx, dw, db = load("y", N, K), load("dx", N, D), load("dw", K, D), load("db", K)
bf = lambda t: t.to(torch.bfloat16).double()

# 1. the same bf16 math exactly in f64: only f32 summation error remains
# (a sum of n terms carries at most about n * 2^-24 * sum|terms|; we allow
# 4 * 2^-24 * n * sum|terms|, far below the bf16 effect checked next).
def same_math(name, ours, exact, absterms, n):
    tol = 4 * n * 2.0**-24 * absterms + 1e-30
    worst = ((ours.double() - exact).abs() / tol).max().item()
    print(f"{name}: worst error / f32 summation bound = {worst:.3g}")
    if worst > 1:
        failures.append(f"{name} differs from bf16 math in f64 beyond f32 summation error")

same_math("y", y, bf(x) @ bf(w).T + b.double(), bf(x).abs() @ bf(w).abs().T + b.double().abs(), D)
same_math("dx", dx, bf(gy) @ bf(w), bf(gy).abs() @ bf(w).abs(), K)
same_math("dw", dw, bf(gy).T @ bf(x), bf(gy).abs().T @ bf(x).abs(), N)
# the bias gradient is an f32 column sum of the f32 upstream gradient
same_math("db", db, gy.double().sum(0), gy.double().abs().sum(0), N)

# 2. torch.autocast: torch rounds its output (and bias, and gradients) to
# bf16, a relative error of at most 2^-9 each; ours keeps f32. We allow
# 2^-7 of the magnitudes involved (two such roundings, with a factor 2).
xt, wt, bt = (t.clone().requires_grad_() for t in (x, w, b))
with torch.autocast("cpu", dtype=torch.bfloat16):
    yt = torch.nn.functional.linear(xt, wt, bt)
if yt.dtype != torch.bfloat16:
    failures.append(f"torch's autocast linear gave {yt.dtype}, not bfloat16")
yt.backward(gy.to(yt.dtype))


def vs_torch(name, ours, theirs, scale):
    tol = 2.0**-7 * scale + 1e-6
    worst = ((ours.double() - theirs.double()).abs() / tol).max().item()
    print(f"{name}: worst |ours - torch autocast| / tolerance = {worst:.3g}")
    if worst > 1:
        failures.append(f"{name} differs from torch.autocast beyond the bf16 roundings")


vs_torch("y", y, yt.detach().float(), bf(x).abs() @ bf(w).abs().T + b.double().abs())
vs_torch("dx", dx, xt.grad, bf(gy).abs() @ bf(w).abs())
vs_torch("dw", dw, wt.grad, bf(gy).abs().T @ bf(x).abs())
vs_torch("db", db, bt.grad, gy.double().abs().sum(0))

if failures:
    print("\n".join(failures))
    sys.exit(1)
