"""PyTorch reference for the conv and pool tests (tests/engine/ops-conv).

usage: /usr/bin/python3 torch_conv.py IN OUT

IN holds cases one after another; each case is
    op      int32 length + UTF-8 bytes: conv2d | max_pool2d | avg_pool2d
    params  int32 length + UTF-8 JSON
    count   int32, then that many tensors
and a tensor is int32 ndim, int64 shape[ndim], float32 data (row-major,
little-endian). Inputs, by op:
    conv2d      x, w, [b if params["bias"]], gy
    max_pool2d  x, gy
    avg_pool2d  x, gy
OUT holds, per case, int32 count and the tensors (same format):
    conv2d      y, gx, gw, [gb]
    pools       y, gx
computed in float64 from the float32 inputs (y.backward(gy)), then
rounded to float32.
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F


def read_i32(f):
    b = f.read(4)
    if len(b) < 4:
        return None
    return struct.unpack("<i", b)[0]


def read_tensor(f):
    nd = read_i32(f)
    shape = struct.unpack("<%dq" % nd, f.read(8 * nd)) if nd else ()
    n = 1
    for s in shape:
        n *= s
    data = bytearray(f.read(4 * n))
    t = torch.frombuffer(data, dtype=torch.float32) if n else torch.zeros(0)
    return t.reshape(shape).double()


def write_tensor(f, t):
    t = t.detach().float().contiguous()
    f.write(struct.pack("<i", t.dim()))
    if t.dim():
        f.write(struct.pack("<%dq" % t.dim(), *t.shape))
    f.write(t.numpy().tobytes())


def run_case(op, p, ts):
    if op == "conv2d":
        x, w = ts[0].requires_grad_(), ts[1].requires_grad_()
        b = ts[2].requires_grad_() if p["bias"] else None
        gy = ts[-1]
        y = F.conv2d(x, w, b, stride=p["stride"], padding=p["padding"],
                     dilation=p["dilation"], groups=p["groups"])
        y.backward(gy)
        out = [y, x.grad, w.grad]
        if b is not None:
            out.append(b.grad)
        return out
    x, gy = ts[0].requires_grad_(), ts[1]
    if op == "max_pool2d":
        y = F.max_pool2d(x, p["kernel"], p["stride"], p["padding"])
    elif op == "avg_pool2d":
        y = F.avg_pool2d(x, p["kernel"], p["stride"], p["padding"],
                         count_include_pad=p["count_include_pad"])
    else:
        raise SystemExit("unknown op %r" % op)
    y.backward(gy)
    return [y, x.grad]


def main():
    torch.set_num_threads(1)
    with open(sys.argv[1], "rb") as f, open(sys.argv[2], "wb") as out:
        while True:
            n = read_i32(f)
            if n is None:
                break
            op = f.read(n).decode()
            p = json.loads(f.read(read_i32(f)).decode())
            ts = [read_tensor(f) for _ in range(read_i32(f))]
            res = run_case(op, p, ts)
            out.write(struct.pack("<i", len(res)))
            for t in res:
                write_tensor(out, t)


if __name__ == "__main__":
    main()
