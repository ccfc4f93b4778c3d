"""Training speed of Ember against PyTorch, side by side in one run.

For each model (fmnist-mlp, fmnist-cnn) it runs, interleaved and
repeated: Ember (`ember train`, 2 threads), PyTorch as a user runs it by
default, PyTorch with 2 intra-op threads (its default where it counts
both cores, BASELINE.md's "default, 2 threads": on some virtual machines
it counts one core and its plain default is then its best configuration;
the intra-op thread count of each is printed), and PyTorch in its best
configuration on 2 cores (torch.set_num_threads(1), OpenBLAS at 2
threads), and with OpenBLAS at 1 thread too (on some hosts OpenBLAS's
second thread makes PyTorch's steps bimodal: half the runs at 40% of the
speed of the rest); "torch-fastest" is, round by round, the fastest of
those two and of the 2-thread contender where it ran the same samples
(on some machines 2 intra-op threads win on the CNN), the figure to
quote against PyTorch's best. The 2-thread contender runs on the first --cores-limit samples
(it is slow on the MLP, and samples/s is a rate). Same batch size,
optimiser and data (Fashion-MNIST preloaded in memory). It prints the
median samples/s of each, Ember's ratio to each, effective GFLOP/s
(3 x forward FLOPs per sample: forward, input grads, weight grads) as a
fraction of the GEMM library's ceiling on the model's shapes, and peak
RSS.

usage: /usr/bin/python3 tests/bench/bench_train.py [--build build]
         [--models mlp,cnn] [--repeat 3] [--cnn-limit 20000] [--cores-limit 10000]
         [--native-blas] [--ember-isas all|generic,avx2,avx512]

Ember's kernel set (the train JSON's cpu_kernels) and BLAS core are
printed for each model. EMBER_CPU_ISA in the environment caps Ember's
kernels (EMBER_CPU_ISA=avx2 runs the AVX2 variant, an AVX2-only
processor such as Zen 3); PyTorch's oneDNN (its convolutions) is then
capped to the same level (ONEDNN_MAX_CPU_ISA) unless --torch-uncapped,
so that both sides run what that processor would. --ember-isas runs
Ember once per cap in each round ("ember[avx2]", ...; "all": every
kernel set this processor runs), each compared with PyTorch.

--native-blas unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for every
contender (OpenBLAS then picks the processor's own kernels, AVX-512 where
there is one); the BLAS core that ran is printed either way.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def fwd_flops(spec):
    """Forward FLOPs of one sample (a multiply-add counts 2)."""
    shape, total = list(spec["input"]["shape"]), 0
    for node in spec["nodes"]:
        t = node["type"]
        if t == "Flatten":
            d = 1
            for s in shape:
                d *= s
            shape = [d]
        elif t == "Linear":
            total += 2 * shape[0] * node["out_features"]
            shape = [node["out_features"]]
        elif t == "Conv2d":
            k, p = node["kernel_size"], node.get("padding", 0)
            c, h, w = shape
            ho, wo = h + 2 * p - k + 1, w + 2 * p - k + 1
            total += 2 * node["out_channels"] * c * k * k * ho * wo
            shape = [node["out_channels"], ho, wo]
        elif t == "MaxPool2d":
            k = node["kernel_size"]
            shape = [shape[0], shape[1] // k, shape[2] // k]
    return total


def run_json(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def blas_env(ember, native_blas, blas_core=None):
    """The environment every contender runs in: OpenBLAS's core as
    configured, or (native_blas) the processor's own; where OpenBLAS would
    fall back to its generic kernels, ember picks the processor's family
    and every contender gets that same family."""
    env = dict(os.environ)
    if native_blas:
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    if blas_core:
        env["OPENBLAS_CORETYPE"] = blas_core
    elif "OPENBLAS_CORETYPE" not in env:
        probe = run_json([ember, "train", os.path.join(ROOT, "data", "models", "fmnist-mlp.json"),
                          "--epochs", "0", "--quiet"], env)
        env["OPENBLAS_CORETYPE"] = probe["blas_core"]
    return env


# EMBER_CPU_ISA's levels, lowest first, and the kernel set each runs
ISA_LEVELS = ["generic", "avx2", "avx512", "avx512_bf16", "amx"]
KERNEL_SETS = ["generic", "avx2", "avx512"]
ONEDNN_ISA = {"generic": "SSE41", "avx2": "AVX2"}


def ember_caps(ember, want, env):
    """The EMBER_CPU_ISA caps to run Ember under: [None] (the environment's
    own) unless --ember-isas; "all" is every kernel set the processor runs."""
    if not want:
        return [None]
    dev = run_json([ember, "devices", "--json"], env)
    cpu = [d for d in dev["devices"] if d["kind"] == "cpu"][0]
    have = ISA_LEVELS.index(cpu["isa_detected"])
    caps = KERNEL_SETS if want == "all" else want.split(",")
    for c in caps:
        if c not in ISA_LEVELS:
            sys.exit("--ember-isas: unknown level %s (one of %s)" % (c, ", ".join(ISA_LEVELS)))
    return [c for c in caps if ISA_LEVELS.index(c) <= have]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cnn-limit", type=int, default=20000)
    ap.add_argument("--cores-limit", type=int, default=10000)
    ap.add_argument("--native-blas", action="store_true")
    ap.add_argument("--blas-core", default=None,
                    help="OPENBLAS_CORETYPE for every contender (e.g. Haswell, SkylakeX)")
    ap.add_argument("--ember-isas", default=None,
                    help="run Ember once per EMBER_CPU_ISA cap: a list, or all")
    ap.add_argument("--torch-uncapped", action="store_true",
                    help="leave PyTorch's oneDNN at the processor's best under EMBER_CPU_ISA")
    a = ap.parse_args()
    ember = os.path.join(a.build, "app", "ember")
    env = blas_env(ember, a.native_blas, a.blas_core)
    caps = ember_caps(ember, a.ember_isas, env)
    ekeys = ["ember" if c is None else "ember[%s]" % c for c in caps]
    tenv = dict(env)
    cap = env.get("EMBER_CPU_ISA")
    if cap in ONEDNN_ISA and not a.torch_uncapped:
        tenv["ONEDNN_MAX_CPU_ISA"] = ONEDNN_ISA[cap]
    print("EMBER_CPU_ISA=%s; PyTorch's oneDNN: %s" % (
        cap or "unset", "ONEDNN_MAX_CPU_ISA=" + tenv["ONEDNN_MAX_CPU_ISA"]
        if "ONEDNN_MAX_CPU_ISA" in tenv else "the processor's best"))
    gemm = run_json([os.path.join(a.build, "tests", "bench", "bench-gemm"), "2"], env)
    ceil = {s["name"]: s["gflops"] for s in gemm["shapes"]}
    print("OpenBLAS core: %s (OPENBLAS_CORETYPE=%s), 2 threads" %
          (gemm["core"], env.get("OPENBLAS_CORETYPE", "unset")))
    print("GEMM ceiling (GFLOP/s): " + ", ".join("%s %.0f" % (k, v) for k, v in ceil.items()))
    print()
    rows = []
    for m in a.models.split(","):
        spec_path = os.path.join(ROOT, "data", "models", "fmnist-%s.json" % m)
        spec = json.load(open(spec_path))
        limit = a.cnn_limit if m == "cnn" else 0
        lim = ["--limit", str(limit)] if limit else []
        res = {k: [] for k in ekeys}
        res.update({"torch-default": [], "torch-2threads": [], "torch-best": [],
                    "torch-blas1": []})
        rss = {k: [] for k in res}
        core, tthreads, ekern = {}, {}, {}
        for _ in range(a.repeat):
            for c, ek in zip(caps, ekeys):
                eenv = dict(env)
                if c is not None:
                    eenv["EMBER_CPU_ISA"] = c
                e = run_json([ember, "train", spec_path, "--epochs", "1", "--threads", "2",
                              "--quiet", "--no-record"] + lim, eenv)
                res[ek].append(e["train_samples_per_sec"])
                rss[ek].append(e["peak_rss_mb"])
                ekern[ek] = "%s kernels, OpenBLAS %s" % (e.get("cpu_kernels", "?"),
                                                         e.get("blas_core", "?"))
            for mode, key, th in (("default", "torch-default", 2), ("cores", "torch-2threads", 2),
                                  ("best", "torch-best", 2), ("best", "torch-blas1", 1)):
                tl = lim
                if mode == "cores" and a.cores_limit and (not limit or a.cores_limit < limit):
                    tl = ["--limit", str(a.cores_limit)]
                t = run_json([sys.executable, os.path.join(HERE, "bench_torch.py"), spec_path,
                              "--mode", mode, "--threads", str(th)] + tl, tenv)
                res[key].append(t["samples_per_sec"])
                rss[key].append(t["peak_rss_mb"])
                core[mode] = t["blas_core"]
                tthreads[key] = t["torch_threads"]
        flops = 3 * fwd_flops(spec)
        if m == "mlp":
            ceiling = statistics.median([v for k, v in ceil.items() if k.startswith("mlp.fc1") or k.startswith("mlp.fc2")])
        else:
            ceiling = statistics.median([v for k, v in ceil.items() if k.startswith("cnn.conv2")])
        # the 2-thread contender counts where it ran the same samples
        same = not (a.cores_limit and (not limit or a.cores_limit < limit))
        two = res["torch-2threads"] if same else [0.0] * len(res["torch-best"])
        res["torch-fastest"] = [max(b, o, t) for b, o, t in
                                zip(res["torch-best"], res["torch-blas1"], two)]
        rss["torch-fastest"] = rss["torch-best"]
        med = {k: statistics.median(v) for k, v in res.items()}
        print("fmnist-%s (%s samples, batch %d, %s; torch BLAS core %s):" % (
            m, limit or 60000, spec["training"]["batch_size"], spec["training"]["optimizer"],
            core.get("best", "?")))
        for k in res:
            print("  %-14s %9.0f samples/s  (runs: %s)  %6.1f GFLOP/s  peak RSS %4.0f MiB%s" % (
                k, med[k], ", ".join("%.0f" % v for v in res[k]), med[k] * flops * 1e-9,
                statistics.median(rss[k]),
                "  [torch threads %d]" % tthreads[k] if k in tthreads else
                "  [%s]" % ekern[k] if k in ekern else ""))
        ratios = {}
        for ek in ekeys:
            ratios[ek] = {}
            for k in ("torch-fastest", "torch-best", "torch-blas1", "torch-default",
                      "torch-2threads"):
                r = [e / t for e, t in zip(res[ek], res[k])]
                ratios[ek][k] = statistics.median(r)
                print("  %s / %-14s %.2fx (per pair: %s)" % (ek, k, ratios[ek][k],
                                                           ", ".join("%.2f" % x for x in r)))
            print("  %s effective %.1f GFLOP/s = %.0f%% of the GEMM ceiling on its shapes "
                  "(%.0f GFLOP/s)" % (ek, med[ek] * flops * 1e-9,
                                      100 * med[ek] * flops * 1e-9 / ceiling, ceiling))
            print("  peak RSS %s / torch-best: %.2f" % (
                ek, statistics.median(rss[ek]) / statistics.median(rss["torch-best"])))
        print()
        r0 = ratios[ekeys[0]]
        rows.append({"model": m, "median_samples_per_sec": med, "ratio_best": r0["torch-best"],
                     "ratio_fastest": r0["torch-fastest"],
                     "ratio_default": r0["torch-default"],
                     "ratio_2threads": r0["torch-2threads"],
                     "ratios": ratios, "ember_kernels": ekern,
                     "torch_threads": tthreads,
                     "peak_rss_mb": {k: statistics.median(v) for k, v in rss.items()}})
    print(json.dumps({"blas_core": gemm["core"], "results": rows}))


if __name__ == "__main__":
    main()
