#!/usr/bin/python3
"""torch-ref.py DIR: PyTorch's results for test-torch.c.

Reads the inputs test-torch.c wrote into DIR (raw little-endian f32):
  x (4, 5, 6) in [-6, 6], p (4, 5, 6) in [0.05, 6], b (5, 1) in [0.5, 2],
  g (4, 5, 6) the upstream gradient, mask (5, 6) u8,
and writes one raw file per result (f32, or i64 for indices) into DIR.
Exits 77 (skip) when torch cannot be imported.
"""
import os
import sys

try:
    import torch
except Exception:  # noqa: BLE001 - any import failure means "no reference"
    sys.exit(77)

d = sys.argv[1]


def load(name, shape):
    t = torch.from_file(os.path.join(d, name + ".bin"), size=int(torch.tensor(shape).prod()),
                        dtype=torch.float32)
    return t.reshape(shape).clone()


def save(name, t):
    t = t.detach().contiguous()
    ext = ".i64" if t.dtype == torch.int64 else ".bin"
    with open(os.path.join(d, name + ext), "wb") as f:
        f.write(t.numpy().tobytes())


x = load("x", (4, 5, 6))
p = load("p", (4, 5, 6))
b = load("b", (5, 1))
g = load("g", (4, 5, 6))
with open(os.path.join(d, "mask.bin"), "rb") as f:
    mask = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(5, 6).bool()

with torch.no_grad():
    save("gelu", torch.nn.functional.gelu(x))
    save("gelu_tanh", torch.nn.functional.gelu(x, approximate="tanh"))
    save("silu", torch.nn.functional.silu(x))
    save("sigmoid", torch.sigmoid(x))
    save("tanh", torch.tanh(x))
    save("exp", torch.exp(x))
    save("log", torch.log(p))
    save("sqrt", torch.sqrt(p))
    save("pow2", torch.pow(x, 2.0))
    save("pow1.7", torch.pow(p, 1.7))
    save("pow-0.5", torch.pow(p, -0.5))
    save("relu", torch.relu(x))
    save("clamp", torch.clamp(x, -1.5, 2.5))
    save("sum1", x.sum(1))
    save("mean-1", x.mean(-1, keepdim=True))
    save("sum0", x.sum(0))
    mx, ix = x.max(0)
    save("max0", mx)
    save("argmax0", ix)
    mx, ix = x.max(2)
    save("max2", mx)
    save("argmax2", ix)
    save("sum_all", x.sum())
    save("mean_all", x.mean())
    save("add", x + b)
    save("mul", x * b)
    save("div", x / b)
    save("sub", b - x)
    save("masked_fill", x.masked_fill(mask, -1.25))

# gradients with upstream g
for name, fn, src in [("gelu", torch.nn.functional.gelu, x),
                      ("gelu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x),
                      ("silu", torch.nn.functional.silu, x),
                      ("sigmoid", torch.sigmoid, x), ("tanh", torch.tanh, x),
                      ("log", torch.log, p), ("pow1.7", lambda t: torch.pow(t, 1.7), p)]:
    xi = src.clone().requires_grad_(True)
    fn(xi).backward(g)
    save("grad-" + name, xi.grad)

xi = x.clone().requires_grad_(True)
xi.masked_fill(mask, -1.25).backward(g)
save("grad-masked_fill", xi.grad)

xi = x.clone().requires_grad_(True)
bi = b.clone().requires_grad_(True)
(xi / bi).backward(g)
save("grad-div-x", xi.grad)
save("grad-div-b", bi.grad)

xi = x.clone().requires_grad_(True)
bi = b.clone().requires_grad_(True)
(xi * bi).backward(g)
save("grad-mul-b", bi.grad)

xi = x.clone().requires_grad_(True)
xi.max(1)[0].backward(g[:, 0, :])
save("grad-max1", xi.grad)
