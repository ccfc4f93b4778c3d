#!/usr/bin/env python3
"""test_train_device.py: training end to end on a device, `ember train
--device D` against the CPU.

Usage: test_train_device.py EMBER_EXE SOURCE_ROOT [DEVICE]

DEVICE is "ref" (the default: the reference device, the device code path
on the host, which every machine has) or "cuda" (suite 'gpu'; exits 77,
skip, when `ember devices` lists no CUDA device). Each check trains
fmnist-mlp for 20 steps (no shuffle, --limit 640, batch 32) on the CPU
and on DEVICE, recorded in a registry of the test's own, and compares:
  - SGD with momentum, and Adam: every step's loss and gradient norm, and
    the final weights (--save), within TOL (1e-4 on ref, 1e-3 on cuda);
  - --clip-grad-norm: the same with clipping active;
  - --amp bf16, with and without the loss scaler: close to the CPU's bf16
    run (both round the GEMM operands to bf16; tolerance 2e-2 on the
    loss); --amp f16 --amp-scaler (a device mode) close to the CPU's f32
    run (0.1 per step), its final loss scale a power of two no larger than
    65536;
  - checkpoints: a run stopped on DEVICE resumes on the CPU, and one
    stopped on the CPU resumes on DEVICE, ending where the uninterrupted
    CPU run ends (TOL);
  - `ember eval --device` gives the CPU's test loss and accuracy, and
    `ember predict --device` its classes and probabilities;
  - `ember devices` (text and --json) lists cpu, ref:0 and why CUDA is
    missing, or each CUDA device; --device cuda without one is exit 2;
  - out of device memory (ref only: EMBER_REF_DEVICE_MEMORY caps it): the
    pre-flight estimate refuses before recording anything and names the
    largest batch that fits; past it (--no-preflight) the run stops at the
    step with the allocator's message (op, size, allocated / reserved /
    peak), exit 1, recorded as failed with its message; with --auto-batch
    it halves the batch, says so and finishes; the pre-flight with
    --auto-batch starts at a batch that fits; a run that halved its batch
    and stopped resumes at the halved batch, ending bit for bit where the
    uninterrupted run ends.
"""
import array
import json
import math
import os
import struct
import sys
import tempfile

# the registry CLI tests' Ember (it imports torch only in the helpers that
# read tensors: the GPU machines' /usr/bin/python3 may not have it)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_util import FMNIST, HAVE_DATA, Ember  # noqa: E402

SKIP = 77


def load_safetensors(path):
    """(tensors, metadata) of a safetensors file: f32 tensors as flat
    arrays (others skipped), metadata as a dict of strings."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None) or {}
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] == "F32":
            a = array.array("f")
            b, end = e["data_offsets"]
            a.frombytes(data[b:end])
            if sys.byteorder != "little":
                a.byteswap()
            out[name] = a
    return out, meta


def model_tensors(path):
    """The model's f32 tensors of a weights file or a checkpoint."""
    t, _ = load_safetensors(path)
    return {k: v for k, v in t.items() if not k.startswith("optim/")}


def max_diff(a, b):
    ta, tb = model_tensors(a), model_tensors(b)
    assert set(ta) == set(tb), "tensor names differ: %s vs %s" % (sorted(ta), sorted(tb))
    return max(max(abs(x - y) for x, y in zip(ta[k], tb[k])) for k in ta)


STEPS = ["--limit", "640", "--batch", "32", "--epochs", "1", "--no-shuffle", "--threads", "1",
         "--quiet"]


class Check:
    def __init__(self, exe, source, device):
        self.device = device
        self.tol = 1e-4 if device == "ref" else 1e-3
        self.tmp = tempfile.mkdtemp(prefix="ember-train-device-")
        self.em = Ember(exe, source, os.path.join(self.tmp, "home"))
        self.n = 0

    def path(self, name):
        return os.path.join(self.tmp, name)

    def train(self, device, *args, save=None, spec=None):
        """A recorded run on device; returns (summary JSON, run id, weights path)."""
        self.n += 1
        save = save or self.path("w%d.safetensors" % self.n)
        s = self.em.train(spec or self.em.spec(), "--device", device, "--save", save, *args)
        assert s["device"].startswith(device), s
        return s, s["run_id"], save

    def series(self, run, key):
        rows = json.loads(self.em.ok("metrics", str(run), key, "--json").stdout)
        return [(r["step"], r["value"]) for r in rows]

    def same_run(self, what, a, b, tol, keys=("loss", "grad_norm")):
        """Runs a (CPU) and b (device): summaries, per-step series, weights."""
        (sa, ra, wa), (sb, rb, wb) = a, b
        assert sa["steps"] == sb["steps"] == 20, (sa, sb)
        for key in keys:
            xa, xb = self.series(ra, key), self.series(rb, key)
            assert len(xa) == len(xb) == 20, (what, key, len(xa), len(xb))
            for (s1, v1), (s2, v2) in zip(xa, xb):
                assert s1 == s2 and abs(v1 - v2) <= tol * max(1.0, abs(v1)), (
                    "%s: %s at step %d: cpu %.7g, %s %.7g" % (what, key, s1, v1, self.device, v2))
        d = max_diff(wa, wb)
        assert d <= tol, "%s: final weights differ by %g (tolerance %g)" % (what, d, tol)
        assert abs(sa["test_loss"] - sb["test_loss"]) <= tol * 10, (sa, sb)
        print("ok: %s: 20 steps, weights within %.2g, test loss %.5f / %.5f" %
              (what, d, sa["test_loss"], sb["test_loss"]))

    def compare(self, what, *args, tol=None, keys=("loss", "grad_norm"), spec=None):
        a = self.train("cpu", *STEPS, *args, spec=spec)
        b = self.train(self.device, *STEPS, *args, spec=spec)
        self.same_run(what, a, b, tol or self.tol, keys)
        return a, b

    # ---- the checks ----------------------------------------------------------
    def adam_spec(self, optimizer, lr):
        """fmnist-mlp with Adam's eps at 1e-6 instead of 1e-8. Adam divides
        each gradient element by its running RMS, so an element whose
        gradient is rounding noise (|g| ~ 1e-9: a sum that cancels, which
        the CPU's GEMM and the device's loops add in different orders,
        OpenBLAS's order differing by processor) takes a step of about
        +-lr whatever its sign: with eps 1e-8, 20 AdamW steps at lr 2e-3
        on an AVX2 processor left the CPU and ref losses 5e-4 apart from
        step 12 on, against 1e-7 up to step 11. With eps 1e-6 such an
        element moves by at most lr * |g| / eps ~ 1e-3 lr, and the runs
        agree to the f32 rounding of the loss (1.2e-7 over 20 steps) on
        every processor; the code under test (moments, bias correction,
        decoupled weight decay, clipping) is the same."""
        path = self.path("%s-eps.json" % optimizer)
        with open(self.em.spec()) as f:
            spec = json.load(f)
        spec["training"] = dict(spec.get("training", {}), optimizer=optimizer, lr=lr, eps=1e-6)
        spec["training"].pop("momentum", None)
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def optimisers(self):
        self.compare("sgd momentum", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9")
        self.compare("adam", spec=self.adam_spec("adam", 0.001))
        self.compare("adamw clip", "--clip-grad-norm", "0.5", spec=self.adam_spec("adamw", 0.002))
        # the clip was active: the norms before clipping are above 0.5
        a, _ = self.compare("sgd clip", "--optimizer", "sgd", "--lr", "0.1", "--clip-grad-norm",
                            "0.25")
        norms = [v for _, v in self.series(a[1], "grad_norm")]
        assert sum(n > 0.25 for n in norms) >= 10, norms

    def amp_pair(self, what, cpu_args, dev_args, tol=2e-2):
        a = self.train("cpu", *STEPS, *cpu_args)
        b = self.train(self.device, *STEPS, *dev_args)
        la, lb = self.series(a[1], "loss"), self.series(b[1], "loss")
        worst = max(abs(x[1] - y[1]) for x, y in zip(la, lb))
        assert len(la) == len(lb) == 20 and worst <= tol, "%s: losses differ by %g" % (
            what, worst)
        assert abs(a[0]["train_loss"] - b[0]["train_loss"]) <= tol / 4, (what, a[0], b[0])
        assert lb[-1][1] < lb[0][1] - 0.2, "%s on %s did not train: %s" % (what, self.device, lb)
        print("ok: %s: losses within %.3g of the CPU's" % (what, worst))
        return b

    def amp(self):
        self.amp_pair("amp bf16", ["--amp", "bf16"], ["--amp", "bf16"])
        # the loss scaler's unscale and Inf/NaN check run on the device
        self.amp_pair("amp bf16 + scaler", ["--amp", "bf16", "--amp-scaler"],
                      ["--amp", "bf16", "--amp-scaler"])
        # f16 (a device mode) against the CPU in f32 (lr 0.1 and momentum 0.9
        # amplify the rounding: 0.1 per step, 0.025 on the mean); the scale
        # in the final checkpoint is a power of two, at most its start
        # (65536): it only halves on an overflow and grows after 2000 clean
        # steps
        _, run, _ = self.amp_pair("amp f16 + scaler", [], ["--amp", "f16", "--amp-scaler"],
                                  tol=0.1)
        final = [c for c in self.em.checkpoints(run) if c["kind"] == "final"]
        _, meta = load_safetensors(final[-1]["path"])
        scale = float(meta["amp_scale"])
        assert 1 <= scale <= 65536 and scale == 2.0 ** round(math.log2(scale)), meta
        print("ok: f16 loss scale %g after 20 steps (%s skipped)" % (scale, meta["amp_skipped"]))

    def scaler_skips(self):
        """The trainer's skip path: from a scale of 1e10, f16's backward
        overflows (the scaled gradients pass 65504), so each step is skipped
        and the scale halves until it fits (after 11 halvings here). Eleven
        skipped steps leave the weights as they started; on 16 batches the
        last 5 train."""
        em = self.em
        init = self.path("scaler-init.safetensors")
        em.train(em.spec(), "--epochs", "0", "--save", init, "--quiet", "--no-record")
        args = ["--device", self.device, "--amp", "f16", "--amp-scaler", "--amp-init-scale",
                "1e10", "--batch", "128", "--epochs", "1", "--no-shuffle", "--quiet"]
        for batches, steps in ((11, 0), (16, 5)):
            w = self.path("scaler-%d.safetensors" % batches)
            s = em.train(em.spec(), *args, "--limit", str(128 * batches), "--save", w)
            final = [c for c in em.checkpoints(s["run_id"]) if c["kind"] == "final"]
            _, meta = load_safetensors(final[-1]["path"])
            assert s["steps"] == steps and int(meta["amp_skipped"]) == 11, (s, meta)
            assert float(meta["amp_scale"]) == 1e10 / 2 ** 11, meta
            if steps == 0:
                d = max_diff(init, w)
                assert d == 0, "skipped steps changed the weights by %g" % d
        print("ok: the scaler skipped 11 overflowing f16 steps (scale 1e10 -> %g), weights "
              "untouched, then trained" % (1e10 / 2 ** 11))

    def resume(self):
        args = ["--optimizer", "adam", "--lr", "0.001"]
        full = self.train("cpu", *STEPS, *args)
        for first, second in ((self.device, "cpu"), ("cpu", self.device)):
            s, run, _ = self.train(first, *STEPS, *args, "--stop-after-steps", "10")
            assert s["stopped"] and s["steps"] == 10, s
            p = self.em.run("train", "--resume", str(run), "--device", second, "--quiet",
                            "--save", self.path("resumed.safetensors"))
            assert p.returncode == 0, p.stderr[-2000:]
            assert "not bit for bit" in p.stderr, p.stderr  # the device change is said
            r = json.loads(p.stdout.strip().splitlines()[-1])
            assert r["steps"] == 20 and r["device"].startswith(second), r
            d = max_diff(full[2], self.path("resumed.safetensors"))
            assert d <= self.tol, "resume %s -> %s: weights differ by %g" % (first, second, d)
            print("ok: stopped on %s at step 10, resumed on %s: weights within %.2g" %
                  (first, second, d))

    def evaluate(self):
        _, _, w = self.train("cpu", *STEPS)
        r = [json.loads(self.em.ok("eval", self.em.spec(), "--weights", w, "--device", d,
                                   "--batch", "500").stdout) for d in ("cpu", self.device)]
        assert abs(r[0]["test_loss"] - r[1]["test_loss"]) <= self.tol, r
        assert abs(r[0]["test_accuracy"] - r[1]["test_accuracy"]) <= 2e-4, r
        print("ok: eval on %s: test loss %.5f (cpu %.5f)" % (self.device, r[1]["test_loss"],
                                                            r[0]["test_loss"]))
        images = os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")
        rows = []
        for d in ("cpu", self.device):
            out = self.em.ok("predict", self.em.spec(), "--weights", w, images, "--limit", "300",
                             "--batch", "128", "--json", "--device", d).stdout
            rows.append([json.loads(x) for x in out.strip().splitlines()][:-1])
        assert len(rows[0]) == len(rows[1]) == 300
        for a, b in zip(*rows):
            assert a["top_k"] == b["top_k"] and max(
                abs(x - y) for x, y in zip(a["probs"], b["probs"])) <= self.tol, (a, b)
        print("ok: predict on %s: 300 samples, the CPU's classes and probabilities" % self.device)

    def devices(self):
        text = self.em.ok("devices").stdout
        j = json.loads(self.em.ok("devices", "--json").stdout)
        names = [d["device"] for d in j["devices"]]
        assert "cpu" in names and "ref:0" in names, j
        assert "ref:0" in text and "cpu" in text, text
        cuda = [d for d in j["devices"] if d["kind"] == "cuda"]
        for d in cuda:
            assert d["total_bytes"] > 0 and d["compute_capability"], d
        if not cuda:
            why = [u for u in j["unavailable"] if u["kind"] == "cuda"]
            assert why and why[0]["reason"], j
            assert "cuda" in text and "unavailable" in text, text
            p = self.em.run("train", self.em.spec(), "--device", "cuda", "--quiet")
            assert p.returncode == 2 and "--device cuda" in p.stderr, (p.returncode, p.stderr)
            assert not os.path.exists(self.em.db) or not self.em.sql(
                "SELECT id FROM runs WHERE device LIKE 'cuda%'"), "a refused run was recorded"
            print("ok: no CUDA device: %s" % why[0]["reason"])
        p = self.em.run("train", self.em.spec(), "--device", "tpu", "--quiet")
        assert p.returncode == 2 and "tpu" in p.stderr, p.stderr
        print("ok: ember devices lists %s" % ", ".join(names))

    def out_of_memory(self):
        env = dict(self.em.env)
        self.em.env["EMBER_REF_DEVICE_MEMORY"] = "3000000"
        try:
            before = self.em.sql("SELECT count(*) FROM runs")[0][0]
            base = ["--limit", "256", "--batch", "64", "--epochs", "1", "--no-shuffle",
                    "--threads", "1", "--quiet", "--device", "ref"]
            # the pre-flight refuses before anything is recorded
            p = self.em.run("train", self.em.spec(), *base)
            assert p.returncode == 1 and "pre-flight" in p.stderr, p.stderr
            assert "--batch" in p.stderr and "free" in p.stderr, p.stderr
            assert self.em.sql("SELECT count(*) FROM runs")[0][0] == before
            # past it: out of memory in the step, the allocator's state named
            p = self.em.run("train", self.em.spec(), *base, "--no-preflight")
            assert p.returncode == 1, (p.returncode, p.stderr)
            for word in ("out of memory on ref:0", "step 1", "batch size 64", "asked",
                         "allocated", "reserved", "peak", "--auto-batch"):
                assert word in p.stderr, "'%s' not in: %s" % (word, p.stderr)
            run, status, message = self.em.sql(
                "SELECT id, status, message FROM runs ORDER BY id DESC LIMIT 1")[0]
            assert status == "failed" and "out of memory on ref:0" in (message or ""), (
                status, message)
            print("ok: out of memory: %s" % p.stderr.strip().splitlines()[-1][:160])
            # --auto-batch: halves, says so, finishes
            p = self.em.run("train", self.em.spec(), *base, "--no-preflight", "--auto-batch")
            assert p.returncode == 0, p.stderr
            s = json.loads(p.stdout.strip().splitlines()[-1])
            assert "going on at batch size 32" in p.stderr, p.stderr
            assert s["final_batch_size"] < 64 and s["steps"] == 256 // s["final_batch_size"], s
            assert self.em.status(s["run_id"]) == "completed"
            assert s["test_accuracy"] > 0.2, s
            # the memory timeline sampled the device: its peak stayed under the cap
            peaks = [v for _, v in self.series(s["run_id"], "mem_peak_mb")]
            assert peaks and 0 < max(peaks) <= 3000000 / 1048576.0, peaks
            print("ok: --auto-batch: finished at batch %d, device peak %.2f MiB" %
                  (s["final_batch_size"], max(peaks)))
            # the pre-flight with --auto-batch starts at a batch that fits
            p = self.em.run("train", self.em.spec(), *base, "--auto-batch")
            assert p.returncode == 0 and "pre-flight" in p.stderr, p.stderr
            s = json.loads(p.stdout.strip().splitlines()[-1])
            assert s["batch_size"] < 64, s
            print("ok: pre-flight --auto-batch: started at batch %d" % s["batch_size"])
            # a run that halved its batch and stopped goes on at the halved batch
            # from where it stopped, ending bit for bit where it would have
            halving = ["--limit", "256", "--batch", "64", "--epochs", "3", "--no-shuffle",
                       "--threads", "1", "--quiet", "--device", "ref", "--no-preflight",
                       "--auto-batch"]
            full = self.path("auto-full.safetensors")
            u = self.em.train(self.em.spec(), *halving, "--save", full)
            s = self.em.train(self.em.spec(), *halving, "--stop-after-steps", "20")
            assert s["stopped"] and s["steps"] == 20, s
            assert s["final_batch_size"] == u["final_batch_size"] < 64, (s, u)
            again = self.path("auto-resumed.safetensors")
            p = self.em.run("train", "--resume", str(s["run_id"]), "--quiet", "--save", again)
            assert p.returncode == 0, p.stderr[-2000:]
            assert "halved its batch from 64 to %d" % u["final_batch_size"] in p.stderr, p.stderr
            assert "pre-flight" not in p.stderr, p.stderr
            r = json.loads(p.stdout.strip().splitlines()[-1])
            assert r["steps"] == u["steps"] and r["batch_size"] == u["final_batch_size"], (r, u)
            d = max_diff(full, again)
            assert d == 0, "the resumed halved run differs from the uninterrupted one by %g" % d
            print("ok: a run halved to batch %d, stopped at step 20 and resumed, ends bit for "
                  "bit where the uninterrupted one does (step %d)" %
                  (u["final_batch_size"], u["steps"]))
        finally:
            self.em.env = env


def main():
    exe, source = sys.argv[1], sys.argv[2]
    device = sys.argv[3] if len(sys.argv) > 3 else "ref"
    if not HAVE_DATA:
        print("skip: Fashion-MNIST is not installed")
        return SKIP
    c = Check(exe, source, device)
    if device != "ref":
        j = json.loads(c.em.ok("devices", "--json").stdout)
        if not any(d["kind"] == device for d in j["devices"]):
            print("skip: no %s device: %s" % (device, j["unavailable"]))
            return SKIP
    c.devices()
    c.optimisers()
    c.amp()
    c.scaler_skips()
    c.resume()
    c.evaluate()
    if device == "ref":
        c.out_of_memory()
    return 0


if __name__ == "__main__":
    sys.exit(main())
