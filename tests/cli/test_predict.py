"""`ember predict` as a user runs it: one small fmnist-mlp trained once
(6000 samples, one epoch), then predictions on the Fashion-MNIST test set
from every kind of input, checked against independent readers:

- IDX with labels reproduces `ember eval`'s accuracy for the same weights;
- the probabilities equal PyTorch's softmax of the same model's logits
  (weights loaded by torch from the safetensors file) within 1e-5;
- PNG files written by OpenCV (grey and RGB) give the IDX path's top-1 and
  probabilities for the same images;
- CSV feature rows (with a header and a label column, or bare) work;
- a registered NAME@ALIAS predicts as SPEC --weights does;
- --quantize int8 keeps top-1 accuracy within a point;
- bad inputs each give a clear message and exit status 1 or 2, never a
  crash.

Runs under Debian's /usr/bin/python3 (torch, numpy, cv2).
usage: test_predict.py EMBER SOURCE_ROOT
"""
import gzip
import json
import math
import os
import shutil
import struct
import zlib
import time
import sys
import tempfile
import unittest

import cv2
import numpy as np
import torch

from cli_util import FMNIST, HAVE_DATA, Ember, model_tensors, sanitized

EMBER = SOURCE = None
SANITIZED = False
TEST_IMAGES = os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")
TEST_LABELS = os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")
NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
         "Bag", "Ankle boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)


def parse_json_lines(stdout):
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert rows and rows[-1].get("summary") is True, "no summary object last"
    return rows[:-1], rows[-1]


@unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not installed")
class Predict(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ember-predict-")
        cls.e = Ember(EMBER, SOURCE, os.path.join(cls.tmp, "home"))
        cls.spec = cls.e.spec("fmnist-mlp.json")
        cls.weights = os.path.join(cls.tmp, "w.safetensors")
        limit = "1000" if SANITIZED else "6000"
        cls.e.train(cls.spec, "--epochs", "1", "--limit", limit, "--seed", "3", "--threads", "2",
                    "--save", cls.weights, "--quiet")
        cls.images = read_idx(TEST_IMAGES)  # (10000, 28, 28) uint8
        cls.labels = read_idx(TEST_LABELS)
        cls.n = 300 if SANITIZED else 10000

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def predict(self, *args, model=None):
        """`ember predict MODEL ARGS --json`: (per-sample rows, summary)."""
        m = model or [self.spec, "--weights", self.weights]
        p = self.e.ok("predict", *m, *args, "--json", "--threads", "2")
        return parse_json_lines(p.stdout)

    def torch_probs(self, images):
        """Softmax of the same MLP's logits in PyTorch, weights from the file."""
        t = model_tensors(self.weights)
        x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
        h = torch.relu(x @ t["fc1.weight"].T + t["fc1.bias"])
        h = torch.relu(h @ t["fc2.weight"].T + t["fc2.bias"])
        logits = h @ t["fc3.weight"].T + t["fc3.bias"]
        return torch.softmax(logits.double(), dim=1).numpy()

    def reorder_tol(self, images):
        """Per image, how far two f32 evaluations of the MLP that sum in
        different orders may put a probability apart: the product's rows do
        not depend on the batch in the AVX-512 GEMM, but OpenBLAS (AVX2)
        blocks and vectorises a product by its shape, so a sample's logits
        change with the batch it is in. A K-term f32 dot product in any
        order is within K u (|w| . |x| + |b|) of the exact one (u = 2^-24);
        an error in a layer's outputs reaches the logits through the later
        layers at most through |W| of the units the ReLUs pass. Two
        evaluations: twice that, Delta, on the logits; a softmax
        probability moves by at most Delta / 2 (its derivative along any
        path is p (dz_i - sum p_j dz_j), at most 2 p (1 - p) Delta), and
        the JSON's 9 digits add 1e-9. This worst case is far above what
        reordering does in practice; the checks at equal batches are exact."""
        t = {k: v.double() for k, v in model_tensors(self.weights).items()}
        x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float64) / 255.0)
        layers = [(t["fc%d.weight" % i], t["fc%d.bias" % i]) for i in (1, 2, 3)]
        xs, masks = [x], []
        for i, (w, b) in enumerate(layers):
            y = xs[-1] @ w.T + b
            if i < 2:
                masks.append((y > 0).double())
                y = torch.relu(y)
            xs.append(y)
        u, delta = 2.0 ** -24, torch.zeros(len(images), layers[-1][0].shape[0], dtype=torch.float64)
        for i, (w, b) in enumerate(layers):
            e = w.shape[1] * u * (xs[i].abs() @ w.abs().T + b.abs())  # this layer's rounding
            for j in range(i + 1, len(layers)):
                e = (e * masks[j - 1]) @ layers[j][0].abs().T
            delta += e
        return (delta.max(dim=1).values + 1e-9).tolist()  # Delta / 2 = one evaluation's bound

    def assertSameRows(self, a, b, tol=0.0):
        """tol: one bound, or one per row."""
        self.assertEqual(len(a), len(b))
        tols = tol if isinstance(tol, list) else [tol] * len(a)
        for ra, rb, t in zip(a, b, tols):
            self.assertEqual(ra["top_k"][0], rb["top_k"][0], (ra, rb))
            np.testing.assert_allclose(ra["probs"], rb["probs"], rtol=0, atol=t)

    # ---- IDX -------------------------------------------------------------------
    def test_idx_with_labels_reproduces_eval(self):
        ev = json.loads(self.e.ok("eval", self.spec, "--weights", self.weights, "--threads", "2")
                        .stdout.strip().splitlines()[-1])
        rows, summary = self.predict(TEST_IMAGES, "--labels", TEST_LABELS, "--top-k", "3",
                                     "--batch", "1000")
        self.assertEqual(len(rows), 10000)
        self.assertEqual(summary["count"], 10000)
        self.assertEqual(summary["labelled"], 10000)
        self.assertEqual(summary["correct"], round(ev["test_accuracy"] * 10000))
        self.assertAlmostEqual(summary["accuracy"], ev["test_accuracy"], places=6)
        # 6000 samples train to ~70%; the sanitised build's 1000 (8 steps) to ~40%.
        self.assertGreater(summary["accuracy"], 0.3 if SANITIZED else 0.6)
        self.assertGreater(summary["samples_per_s"], 0)
        # Every row: its source, three classes by falling probability, names, label.
        for i in (0, 1, 4321, 9999):
            r = rows[i]
            self.assertEqual(r["source"], "%s:%d" % (TEST_IMAGES, i))
            self.assertEqual(len(r["top_k"]), 3)
            self.assertEqual(r["names"], [NAMES[k] for k in r["top_k"]])
            self.assertEqual(r["probs"], sorted(r["probs"], reverse=True))
            self.assertEqual(r["label"], int(self.labels[i]))
        correct = sum(r["top_k"][0] == r["label"] for r in rows)
        self.assertEqual(correct, summary["correct"])
        # The batch size changes nothing but the GEMM's summation order.
        rows7, _ = self.predict(TEST_IMAGES, "--limit", "50", "--batch", "7", "--top-k", "3")
        self.assertSameRows(rows7, rows[:50], tol=self.reorder_tol(self.images[:50]))

    def test_probabilities_match_pytorch(self):
        n = 1000
        rows, summary = self.predict(TEST_IMAGES, "--limit", str(n), "--top-k", "10")
        self.assertEqual(summary["count"], n)
        self.assertNotIn("accuracy", summary)  # no labels given
        ref = self.torch_probs(self.images[:n])
        worst = 0.0
        for i, r in enumerate(rows):
            self.assertEqual(sorted(r["top_k"]), list(range(10)))
            self.assertAlmostEqual(sum(r["probs"]), 1.0, places=6)
            got = np.zeros(10)
            got[r["top_k"]] = r["probs"]
            worst = max(worst, float(np.abs(got - ref[i]).max()))
            if ref[i].max() - np.sort(ref[i])[-2] > 1e-4:  # not a near-tie
                self.assertEqual(r["top_k"][0], int(ref[i].argmax()))
        self.assertLess(worst, 1e-5)
        # --top-k above the class count is capped at it; the default is 5.
        capped, _ = self.predict(TEST_IMAGES, "--limit", "3", "--top-k", "50")
        self.assertEqual([len(r["top_k"]) for r in capped], [10, 10, 10])
        default, _ = self.predict(TEST_IMAGES, "--limit", "3")
        self.assertEqual([len(r["top_k"]) for r in default], [5, 5, 5])

    def test_text_output(self):
        p = self.e.ok("predict", self.spec, "--weights", self.weights, TEST_IMAGES, "--labels",
                      TEST_LABELS, "--limit", "4", "--top-k", "2", "--threads", "1")
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertTrue(lines[0].startswith(TEST_IMAGES + ":0  "), lines[0])
        self.assertIn("[label: Ankle boot]", lines[0])  # test image 0 is an ankle boot
        self.assertEqual(lines[0].count("("), 2)
        self.assertTrue(any(n + " (" in lines[0] for n in NAMES), lines[0])
        self.assertIn("predicted 4 samples", p.stderr)
        self.assertIn("accuracy", p.stderr)

    def test_quantize_int8(self):
        base, bsum = self.predict(TEST_IMAGES, "--labels", TEST_LABELS, "--limit", "3000")
        rows, qsum = self.predict(TEST_IMAGES, "--labels", TEST_LABELS, "--limit", "3000",
                                  "--quantize", "int8")
        self.assertEqual((bsum["quantize"], qsum["quantize"]), ("none", "int8"))
        self.assertLess(abs(qsum["accuracy"] - bsum["accuracy"]), 0.01)
        agree = sum(a["top_k"][0] == b["top_k"][0] for a, b in zip(rows, base))
        self.assertGreater(agree / len(rows), 0.98)
        worst = max(abs(a["probs"][0] - b["probs"][0]) for a, b in zip(rows, base)
                    if a["top_k"][0] == b["top_k"][0])
        self.assertLess(worst, 0.05)
        self.assertGreater(worst, 0.0)  # it did run in int8
        p = self.e.run("predict", self.spec, "--weights", self.weights, TEST_IMAGES,
                       "--quantize", "int4")
        self.assertEqual(p.returncode, 2)
        self.assertIn("int8", p.stderr)

    # ---- PNG -------------------------------------------------------------------
    def test_png_grey_and_rgb_match_idx(self):
        picks = list(range(0, 2000, 97))  # 21 test images
        grey, rgb = [], []
        for i in picks:
            g = self.path("grey-%d.png" % i)
            self.assertTrue(cv2.imwrite(g, self.images[i]))
            c = self.path("rgb-%d.png" % i)
            self.assertTrue(cv2.imwrite(c, cv2.cvtColor(self.images[i], cv2.COLOR_GRAY2BGR)))
            self.assertEqual(cv2.imread(c, cv2.IMREAD_UNCHANGED).shape, (28, 28, 3))
            grey.append(g)
            rgb.append(c)
        # A PNG decodes to the IDX path's floats bit for bit (png.c: v / 255
        # in double, rounded once, is the correctly rounded (float)v / 255.f),
        # so at the same batch (1: the same product shape, whichever GEMM)
        # the answers are identical.
        idx_rows, _ = self.predict(TEST_IMAGES, "--limit", "2000", "--top-k", "10", "--batch", "1")
        want = [idx_rows[i] for i in picks]
        rows, _ = self.predict(*grey, "--top-k", "10", "--batch", "1")
        self.assertSameRows(rows, want, tol=0.0)
        rows, _ = self.predict(*rgb, "--top-k", "10", "--batch", "1")
        self.assertSameRows(rows, want, tol=0.0)
        # One argument each, batched across files (batch 8: three batches),
        # against an IDX file of the same images in the same batches: the
        # same products, so identical answers.
        picked = self.path("picked-idx3-ubyte.gz")
        with gzip.open(picked, "wb") as f:
            f.write(struct.pack(">IIII", 0x803, len(picks), 28, 28) + self.images[picks].tobytes())
        want8, _ = self.predict(picked, "--top-k", "10", "--batch", "8")
        rows, summary = self.predict(*grey, "--top-k", "10", "--batch", "8")
        self.assertEqual(summary["count"], len(picks))
        self.assertEqual([r["source"] for r in rows], grey)
        self.assertSameRows(rows, want8, tol=0.0)
        rows, _ = self.predict(*rgb, "--top-k", "10", "--batch", "8")
        self.assertSameRows(rows, want8, tol=0.0)
        # ... and the IDX path's rows of the whole set, up to the summation
        # order a batch's shape brings
        self.assertSameRows(rows, want, tol=self.reorder_tol(self.images[picks]))
        # Mixed with an IDX file in one call: sources keep argument order.
        rows, summary = self.predict(grey[0], TEST_IMAGES, rgb[1], "--limit", "3")
        self.assertEqual([r["source"] for r in rows], [grey[0], TEST_IMAGES + ":0",
                                                       TEST_IMAGES + ":1"])

    # ---- CSV -------------------------------------------------------------------
    def test_csv_rows(self):
        n = 40
        x = self.images[:n].reshape(n, -1).astype(np.float32) / np.float32(255.0)
        labelled = self.path("rows.csv")
        with open(labelled, "w") as f:
            f.write(",".join(["label"] + ["p%d" % j for j in range(784)]) + "\n")
            for i in range(n):
                f.write(",".join([str(int(self.labels[i]))] + ["%.9g" % v for v in x[i]]) + "\n")
        bare = self.path("bare.csv")
        with open(bare, "w") as f:
            for i in range(n):
                f.write(",".join("%.9g" % v for v in x[i]) + "\r\n")
                if i == 5:
                    f.write("\n")  # blank lines are skipped
        idx_rows, idx_sum = self.predict(TEST_IMAGES, "--labels", TEST_LABELS, "--limit", str(n),
                                         "--top-k", "10")
        rows, summary = self.predict(labelled, "--label-column", "0", "--top-k", "10")
        self.assertEqual(summary["count"], n)
        self.assertEqual(summary["correct"], idx_sum["correct"])
        self.assertEqual([r["label"] for r in rows], [int(v) for v in self.labels[:n]])
        self.assertEqual(rows[3]["source"], labelled + ":5")  # its line: the header is line 1
        self.assertSameRows(rows, idx_rows, tol=1e-7)
        rows, summary = self.predict(bare, "--top-k", "10")
        self.assertEqual(summary["count"], n)
        self.assertEqual(rows[6]["source"], bare + ":8")  # after the blank line 7
        self.assertNotIn("label", rows[0])
        self.assertSameRows(rows, idx_rows, tol=1e-7)

    def test_output_overflow(self):
        # finite inputs whose outputs overflow f32: said per sample, not ranked (NaN
        # probabilities, exit 0, before); the other samples keep their answers; exit 1
        rows = self.path("overflow.csv")
        with open(rows, "w") as f:
            f.write(",".join(["3e38"] * 784) + "\n")
            f.write(",".join(["0.5"] * 784) + "\n")
            f.write(",".join(["2e38", "-2e38"] + ["0"] * 782) + "\n")
        for quant in ([], ["--quantize", "int8"]):
            p = self.e.run("predict", self.spec, "--weights", self.weights, rows, "--json",
                           *quant)
            self.assertEqual(p.returncode, 1, p.stderr)
            out, summary = parse_json_lines(p.stdout)
            self.assertEqual(out[0], {"source": rows + ":1", "error": out[0].get("error")})
            self.assertIn("NaN or Inf", out[0]["error"])
            for r in out[1:]:
                self.assertTrue(all(math.isfinite(v) for v in r["probs"]), (quant, r))
            self.assertEqual(summary["overflowed"], 1)
            self.assertIn("1 sample got no answer", p.stderr)
            p = self.e.run("predict", self.spec, "--weights", self.weights, rows, *quant)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(rows + ":1  error: the model's output holds NaN or Inf", p.stdout)
            self.assertNotIn("nan", p.stdout.lower().replace("holds nan", ""))

    # ---- the registry ------------------------------------------------------------
    def test_registered_alias(self):
        e = self.e
        e.ok("model", "register", "1", "--name", "mlp", "--checkpoint", "last")
        e.ok("model", "promote", "mlp", "1", "--alias", "production")
        want, _ = self.predict(TEST_IMAGES, "--limit", "64", "--top-k", "10")
        for ref in ("mlp@production", "mlp@1"):
            rows, summary = self.predict(TEST_IMAGES, "--limit", "64", "--top-k", "10",
                                         model=[ref])
            self.assertIn("mlp@", summary["model"])
            self.assertEqual([r["names"] for r in rows], [r["names"] for r in want])
            self.assertSameRows(rows, want)
        p = e.run("predict", "mlp@staging", TEST_IMAGES)
        self.assertEqual(p.returncode, 1)
        self.assertIn("staging", p.stderr)

    # ---- bad input -----------------------------------------------------------------
    def assertFails(self, args, *needles, codes=(1, 2)):
        p = self.e.run("predict", *args)
        self.assertIn(p.returncode, codes, "%s: %d\n%s" % (args, p.returncode, p.stderr))
        self.assertEqual(p.stdout, "", args)  # nothing predicted before the error
        for s in needles:
            self.assertIn(s, p.stderr, args)
        return p

    def test_bad_inputs(self):
        m = [self.spec, "--weights", self.weights]
        missing = self.path("nope.png")
        self.assertFails(m + [missing], missing, "cannot open")
        # A truncated IDX file (plain), and one cut inside its header.
        with gzip.open(TEST_IMAGES, "rb") as f:
            raw = f.read(16 + 784 * 10)
        cut = self.path("cut-idx")
        with open(cut, "wb") as f:
            f.write(raw[:16 + 784 * 3 + 100])
        self.assertFails(m + [cut], cut, "truncated")
        with open(cut, "wb") as f:
            f.write(raw[:10])
        self.assertFails(m + [cut], cut, "truncated")
        # A gzip stream cut short.
        with open(TEST_IMAGES, "rb") as f:
            gz = f.read(5000)
        cutgz = self.path("cut.gz")
        with open(cutgz, "wb") as f:
            f.write(gz)
        self.assertFails(m + [cutgz], cutgz)
        # A wrong image size names the file and both shapes.
        big = self.path("big.png")
        cv2.imwrite(big, np.zeros((32, 30), np.uint8))
        self.assertFails(m + [big], big, "30 x 32", "[1, 32, 30]", "[1, 28, 28]")
        # A file called .png that is not one, and bytes that are nothing known.
        fake = self.path("fake.png")
        with open(fake, "w") as f:
            f.write("hello\n")
        self.assertFails(m + [fake], fake, "not a PNG")
        junk = self.path("junk.bin")
        with open(junk, "wb") as f:
            f.write(bytes(range(256)))
        self.assertFails(m + [junk], junk, "not a PNG image, an IDX file")
        # A PNG cut after its header: found when its batch is read.
        good = self.path("good.png")
        cv2.imwrite(good, self.images[0])
        with open(good, "rb") as f:
            data = f.read()
        half = self.path("half.png")
        with open(half, "wb") as f:
            f.write(data[:len(data) // 2])
        p = self.e.run("predict", *m, half)
        self.assertEqual(p.returncode, 1)
        self.assertIn(half, p.stderr)
        # CSV: a row with the wrong column count; a bad number; a bad label.
        bad = self.path("bad.csv")
        with open(bad, "w") as f:
            f.write(",".join(["0.5"] * 784) + "\n" + ",".join(["0.5"] * 783) + "\n")
        self.assertFails(m + [bad], bad, "line 2", "783 columns", "784")
        with open(bad, "w") as f:
            f.write(",".join(["0.5"] * 784) + "\n" + ",".join(["0.5"] * 783 + ["x"]) + "\n")
        self.assertFails(m + [bad], bad, "line 2, column 784")
        with open(bad, "w") as f:
            f.write(",".join(["0.5"] * 784 + ["12"]) + "\n")
        self.assertFails(m + [bad, "--label-column", "last"], bad, "label '12'")
        # Labels that do not fit; labels without an IDX input; a folder.
        self.assertFails(m + [TEST_IMAGES, "--labels", self.path("none")], "cannot open")
        self.assertFails(m + [TEST_IMAGES, "--labels", TEST_IMAGES], "not an IDX labels")
        self.assertFails(m + [good, "--labels", TEST_LABELS], "--labels")
        self.assertFails(m + [self.tmp], "folder")
        self.assertFails(m + [good, "--label-column", "0"], "--label-column", codes=(2,))
        # out of range: the columns a labelled row needs, not said to be the file's
        with open(bad, "w") as f:
            f.write(",".join(["0.5"] * 784) + "\n")
        self.assertFails(m + [bad, "--label-column", "999"],
                         "a labelled row of", "785 columns", "0 to 784", codes=(2,))
        # Usage: --top-k 0, no input, a non-number, --weights missing.
        self.assertFails(m + [TEST_IMAGES, "--top-k", "0"], "--top-k", codes=(2,))
        self.assertFails(m, "INPUT", codes=(2,))
        self.assertFails(m + [TEST_IMAGES, "--batch", "x"], "--batch", codes=(2,))
        self.assertFails([self.spec, TEST_IMAGES], "--weights", codes=(2,))

    def test_inputs_that_hold_nothing_or_lie(self):
        m = [self.spec, "--weights", self.weights]
        # no samples: an error, not "predicted 0 samples" with exit 0
        empty = self.path("empty-idx")
        with open(empty, "wb") as f:
            f.write(bytes([0, 0, 8, 3]) + struct.pack(">III", 0, 28, 28))
        self.assertFails(m + [empty], empty, "no images")
        header = self.path("header.csv")
        with open(header, "w") as f:
            f.write(",".join("p%d" % i for i in range(784)) + "\n\n")
        self.assertFails(m + [header], header, "no rows")
        # a header of absurd sizes: refused in words, with no arithmetic overflow (UBSan)
        absurd = self.path("absurd-idx")
        with open(absurd, "wb") as f:
            f.write(bytes([0, 0, 8, 3]) + struct.pack(">III", 0, 0xFFFFFFFF, 0xFFFFFFFF))
        self.assertFails(m + [absurd], absurd, "absurd")
        png = self.path("huge.png")
        ihdr = struct.pack(">IIBBBBB", 0xFFFFFFFF, 0xFFFFFFFF, 8, 0, 0, 0, 0)
        with open(png, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr +
                    struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)))
        self.assertFails(m + [png], png, "corrupt PNG", "4294967295 x 4294967295")
        # a first CSV row with a typo is that row's error, not a header that drops it
        typo = self.path("typo.csv")
        with open(typo, "w") as f:
            f.write(",".join(["0.5"] * 783 + ["1.2.3"]) + "\n" + ",".join(["0.5"] * 784) + "\n")
        self.assertFails(m + [typo], typo, "line 1, column 784")

    def test_pipes_are_refused_and_never_hang(self):
        m = [self.spec, "--weights", self.weights]
        fifo = self.path("fifo.csv")
        os.mkfifo(fifo)
        # nobody writes to it: refused at once (open() used to wait for a writer)
        t0 = time.time()
        self.assertFails(m + [fifo], fifo, "not a regular file")
        self.assertLess(time.time() - t0, 30)
        # a pipe with a writer and data in it (as <(cat rows.csv) gives): refused, not
        # read in part (sniffing its kind used to eat the first 4 KB)
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # Linux: a writer without a reader
        try:
            os.write(fd, (",".join(["0.5"] * 784) + "\n").encode() * 10)
            self.assertFails(m + [fifo], fifo, "not a regular file")
        finally:
            os.close(fd)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    SANITIZED = sanitized(EMBER)
    unittest.main(argv=[sys.argv[0], "-v"])
