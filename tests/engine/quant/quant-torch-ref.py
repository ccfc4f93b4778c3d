"""quant-torch-ref.py DIR M,D,K: checks the engine's int8 Linear output
DIR/y.bin (M, K) for x (M, D), w (K, D), b (K) against PyTorch (see
test-quant-torch.c). Exit 77 when torch cannot be imported."""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

d = sys.argv[1]
M, D, K = map(int, sys.argv[2].split(","))


def load(name, *shape):
    return torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype="<f4").reshape(shape))


x, w, b, y = load("x", M, D), load("w", K, D), load("b", K), load("y", M, K)
f32 = torch.nn.functional.linear(x, w, b)

# The scheme of engine/quant/quant-private.h in torch's f32 ops.
sw = w.abs().amax(dim=1) / 127
sw = torch.where(sw > 0, sw, torch.ones_like(sw))
qw = torch.clamp(torch.round(w / sw[:, None]), -127, 127)
lo = torch.clamp(x.amin(dim=1), max=0)
hi = torch.clamp(x.amax(dim=1), min=0)
sx = torch.clamp((hi - lo) / 255, min=torch.finfo(torch.float32).tiny)
zp = torch.clamp(torch.round(-lo / sx), 0, 255)
qa = torch.clamp(torch.round(x * (1 / sx)[:, None]) + zp[:, None], 0, 255)
acc = qa.double() @ qw.double().T - zp.double()[:, None] * qw.double().sum(dim=1)[None, :]
emul = acc.float() * (sx[:, None] * sw[None, :]) + b

scale = float(f32.abs().max())
d_emul = float((y - emul).abs().max())
rel = lambda a: float((a - f32).norm() / f32.norm())
ours = rel(y)

# PyTorch's own dynamic quantisation (per-tensor activations, reduce_range).
lin = torch.nn.Linear(D, K)
with torch.no_grad():
    lin.weight.copy_(w)
    lin.bias.copy_(b)
tq = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear},
                                            dtype=torch.qint8)
with torch.no_grad():
    theirs = rel(tq(x))

print("max |ember - torch emulation| %.3g (of %.3g), exact %d/%d" %
      (d_emul, scale, int((y == emul).sum()), y.numel()))
print("relative error vs f32: ember %.3g, torch quantize_dynamic %.3g" % (ours, theirs))
ok = True
if d_emul > 1e-6 * scale:
    print("FAIL: the engine differs from the same scheme computed by torch")
    ok = False
if not (1e-5 < ours < 0.01):
    print("FAIL: error vs f32 outside (1e-5, 1e-2)")
    ok = False
if not ours < theirs:
    print("FAIL: per-row activations should beat per-tensor reduce_range")
    ok = False
sys.exit(0 if ok else 1)
