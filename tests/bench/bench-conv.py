"""PyTorch's side of bench-conv: forward and backward of fmnist-cnn's
convolutions and pools at batch 128, median (and best) of several
repetitions, in PyTorch's best CPU configuration on this machine
(torch.set_num_threads(1); its convolutions run on oneDNN).

usage: /usr/bin/python3 tests/bench/bench-conv.py [THREADS [REPS]]
"""
import sys
import time

import torch
import torch.nn.functional as F


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    torch.set_num_threads(threads)
    n = 128
    ops = [
        ("conv1 1->32 3x3 p1 28x28", False, 1, 28, 32, False),
        ("conv2 32->64 3x3 p1 14x14", False, 32, 14, 64, True),
        ("maxpool1 2x2 32x28x28", True, 32, 28, 0, True),
        ("maxpool2 2x2 64x14x14", True, 64, 14, 0, True),
    ]
    print("torch %s, batch %d, %d threads, median of %d" % (torch.__version__, n, threads, reps))
    print("%-28s %9s %9s %9s %9s %11s" % ("op", "fwd ms", "bwd ms", "total ms", "best ms",
                                          "GFLOP/s"))
    all_ms = 0.0
    for name, pool, c, h, k, x_grad in ops:
        x = (torch.rand(n, c, h, h) * 2 - 1).requires_grad_(x_grad)
        if not pool:
            w = (torch.rand(k, c, 3, 3) * 2 - 1).requires_grad_()
            b = (torch.rand(k) * 2 - 1).requires_grad_()
        def op():
            return F.max_pool2d(x, 2) if pool else F.conv2d(x, w, b, padding=1)

        with torch.no_grad():
            gy = torch.rand_like(op()) * 2 - 1
        tf, tb = [], []
        for r in range(reps + 2):  # two warm-up runs
            t0 = time.perf_counter()
            y = op()
            t1 = time.perf_counter()
            y.backward(gy)
            t2 = time.perf_counter()
            if r >= 2:
                tf.append(t1 - t0)
                tb.append(t2 - t1)
            x.grad = None
            if not pool:
                w.grad = b.grad = None
        tf.sort()
        tb.sort()
        tot = sorted(a + b for a, b in zip(tf, tb))
        f, bw = tf[len(tf) // 2], tb[len(tb) // 2]
        all_ms += 1e3 * (f + bw)
        if pool:
            print("%-28s %9.3f %9.3f %9.3f %9.3f %11s" % (name, 1e3 * f, 1e3 * bw, 1e3 * (f + bw),
                                                        1e3 * tot[0], "-"))
        else:
            fwd = 2.0 * n * k * h * h * c * 9
            bwd = fwd * (2 if x_grad else 1)
            print("%-28s %9.3f %9.3f %9.3f %9.3f %5.0f/%-5.0f" % (
                name, 1e3 * f, 1e3 * bw, 1e3 * (f + bw), 1e3 * tot[0], fwd / f * 1e-9,
                bwd / bw * 1e-9))
    print("%-28s %9s %9s %9.3f" % ("all", "", "", all_ms))


if __name__ == "__main__":
    main()
