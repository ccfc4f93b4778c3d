#!/usr/bin/python3
"""sdpa-torch-ref.py DIR NCASES: em_sdpa against PyTorch (see test-sdpa-torch.c).

PyTorch 1.13 has no F.scaled_dot_product_attention, so the math is written
out in float64: s = q k^T * scale (scale 0: 1 / sqrt(E)), -inf where the
causal mask (key j > query i + S - L) or the key padding mask hides a key,
softmax over the keys, 0 on a row that sees no key, then @ v; gradients by
autograd from the upstream g. Ember's f64 must agree to rounding, its f32
within the float error of its sums. Exit 77 without torch.
"""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

d, n_cases = sys.argv[1], int(sys.argv[2])


def raw(name, dtype="<f8"):
    return np.fromfile(os.path.join(d, name + ".bin"), dtype=dtype)


failures = []
for c in range(n_cases):
    N, H, L, S, E, Ev, causal, pad, scale = raw(f"c{c}-meta")
    N, H, L, S, E, Ev = map(int, (N, H, L, S, E, Ev))
    scale = scale if scale > 0 else 1 / np.sqrt(E)
    t = lambda name, *shape: torch.from_numpy(raw(f"c{c}-{name}").reshape(shape))  # noqa: E731
    q, k, v = (t("q", N, H, L, E).requires_grad_(), t("k", N, H, S, E).requires_grad_(),
               t("v", N, H, S, Ev).requires_grad_())
    g = t("g", N, H, L, Ev)
    hidden = torch.zeros(N, 1, L, S, dtype=torch.bool)
    if causal:
        i = torch.arange(L).reshape(L, 1)
        j = torch.arange(S).reshape(1, S)
        hidden = hidden | (j > i + S - L)
    if pad:
        kpm = torch.from_numpy(raw(f"c{c}-kpm", "u1").reshape(N, S).astype(bool))
        hidden = hidden | kpm.reshape(N, 1, 1, S)
    s = (q @ k.transpose(-1, -2)) * scale
    a = torch.softmax(s.masked_fill(hidden, float("-inf")), -1)
    a = torch.where(hidden.all(-1, keepdim=True), torch.zeros_like(a), a)  # no key: zeros
    o = a @ v
    o.backward(g)
    ref = {"o": o.detach(), "gq": q.grad, "gk": k.grad, "gv": v.grad}
    shapes = {"o": (N, H, L, Ev), "gq": (N, H, L, E), "gk": (N, H, S, E), "gv": (N, H, S, Ev)}
    # f64: rounding only. f32: each score sums E <= 20 float products of
    # values up to 1.5 (20 * 2^-24 * 2.25 ~ 2.7e-6 at worst), the weights and
    # outputs up to S = 130 terms (130 * 2^-24 ~ 8e-6 at worst), the key
    # gradients up to L = 70 rows: relative to the largest value, 3e-5 bounds
    # every one of them.
    for kind, bound in (("64", 1e-11), ("32", 3e-5)):
        worst = 0.0
        for name, r in ref.items():
            ours = torch.from_numpy(raw(f"c{c}-{name}{kind}").reshape(shapes[name]))
            if not torch.isfinite(ours).all():
                failures.append(f"case {c} f{kind} {name}: not finite")
                continue
            rel = ((ours - r).abs().max() / max(1.0, r.abs().max().item())).item()
            worst = max(worst, rel)
            if rel > bound:
                failures.append(f"case {c} f{kind} {name}: {rel:.3g} > {bound}")
        print(f"case {c} (N={N} H={H} L={L} S={S} E={E} Ev={Ev} causal={int(causal)} "
              f"pad={int(pad)}) f{kind}: worst relative difference {worst:.3g}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
