"""nn-torch-ref.py: PyTorch's answers for the neural-network op tests.

Usage: /usr/bin/python3 nn-torch-ref.py IN OUT
IN and OUT hold named f64 arrays, each a text line "name ndim d0 d1 ..."
followed by the values as little-endian doubles. Names are "case.field";
this script reads the inputs of every case it knows, computes in float64
(forward and backward), and writes "case.field" outputs. Exits 77 when
torch cannot be imported, so the caller can skip.
"""
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(77)


def read_arrays(path):
    out = {}
    with open(path, "rb") as f:
        while True:
            line = f.readline()
            if not line:
                break
            parts = line.decode().split()
            name, ndim = parts[0], int(parts[1])
            shape = [int(d) for d in parts[2:2 + ndim]]
            n = 1
            for d in shape:
                n *= d
            vals = struct.unpack("<%dd" % n, f.read(8 * n))
            out[name] = torch.tensor(vals, dtype=torch.float64).reshape(shape)
    return out


def write_arrays(path, arrays):
    with open(path, "wb") as f:
        for name, t in arrays.items():
            t = t.detach().to(torch.float64).contiguous()
            shape = list(t.shape)
            f.write(("%s %d %s\n" % (name, len(shape), " ".join(str(d) for d in shape))).encode())
            f.write(struct.pack("<%dd" % t.numel(), *t.reshape(-1).tolist()))


def grads(y, gy, *inputs):
    y.backward(gy)
    return [t.grad for t in inputs]


def batch_norm(a, case, out, training):
    x, w, b = (a[case + "." + k].clone().requires_grad_() for k in ("x", "w", "b"))
    rm, rv = a[case + ".rm"].clone(), a[case + ".rv"].clone()
    y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1, eps=1e-5)
    gx, gw, gb = grads(y, a[case + ".gy"], x, w, b)
    out.update({case + ".y": y, case + ".gx": gx, case + ".gw": gw, case + ".gb": gb,
                case + ".rm": rm, case + ".rv": rv})


def main():
    a = read_arrays(sys.argv[1])
    out = {}
    for case in ("bn4d_train", "bn2d_train"):
        batch_norm(a, case, out, True)
    batch_norm(a, "bn4d_eval", out, False)

    x, w, b = (a["ln." + k].clone().requires_grad_() for k in ("x", "w", "b"))
    y = F.layer_norm(x, list(w.shape), w, b, eps=1e-5)
    gx, gw, gb = grads(y, a["ln.gy"], x, w, b)
    out.update({"ln.y": y, "ln.gx": gx, "ln.gw": gw, "ln.gb": gb})

    for case, fn, dim in (("lsm1", F.log_softmax, 1), ("lsm0", F.log_softmax, 0),
                          ("sm2", F.softmax, 2)):
        x = a[case + ".x"].clone().requires_grad_()
        y = fn(x, dim=dim)
        (gx,) = grads(y, a[case + ".gy"], x)
        out.update({case + ".y": y, case + ".gx": gx})

    for case, eps in (("ce", 0.1), ("ce0", 0.0)):
        x = a[case + ".x"].clone().requires_grad_()
        t = a[case + ".t"].long()
        loss = F.cross_entropy(x, t, label_smoothing=eps)
        (gx,) = grads(loss, torch.tensor(1.0, dtype=torch.float64), x)
        out.update({case + ".loss": loss, case + ".gx": gx})

    x, y_ = a["mse.a"].clone().requires_grad_(), a["mse.b"].clone().requires_grad_()
    loss = F.mse_loss(x, y_)
    ga, gb = grads(loss, torch.tensor(1.0, dtype=torch.float64), x, y_)
    out.update({"mse.loss": loss, "mse.ga": ga, "mse.gb": gb})

    w = a["emb.w"].clone().requires_grad_()
    y = F.embedding(a["emb.idx"].long(), w)
    (gw,) = grads(y, a["emb.gy"], w)
    out.update({"emb.y": y, "emb.gw": gw})

    write_arrays(sys.argv[2], out)


main()
