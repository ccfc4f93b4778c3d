"""`ember eval --report` against the same figures computed in PyTorch from
the version's weights on Fashion-MNIST's test set: the confusion matrix,
per-class precision/recall/F1, top-5 accuracy, the expected calibration
error over 15 bins of confidence, and the most confident mistakes; the
report is kept with the run (an "eval-report" artifact); a language
model is refused with the reason.

f32 logits (Ember) against f64 (PyTorch): a sample whose two largest
logits lie within 1e-4 of each other may take either class, so counts may
differ by at most the number of such samples (printed; 0 here so far).

usage: test_eval_report.py EMBER SOURCE_ROOT   (Debian's /usr/bin/python3)
"""
import gzip
import json
import os
import shutil
import sys
import tempfile
import unittest

import torch

from cli_util import FMNIST, HAVE_DATA, Ember

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_io  # noqa: E402

EMBER = SOURCE = None


def idx(path, offset):
    return gzip.open(path).read()[offset:]


@unittest.skipUnless(HAVE_DATA, "needs Debian's dataset-fashion-mnist")
class EvalReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-eval-report-")
        self.e = Ember(EMBER, SOURCE, os.path.join(self.tmp, "home"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_report_matches_pytorch(self):
        self.e.train(self.e.spec(), "--epochs", "1", "--limit", "5000", "--threads", "2",
                     "--quiet")
        self.e.ok("model", "register", "1", "--name", "mlp")
        out = json.loads(self.e.ok("eval", "mlp@1", "--report").stdout.strip().splitlines()[-1])
        rep = out["report"]
        w = {k: v.double() for k, v in safetensors_io.load(
            json.loads(self.e.ok("model", "versions", "mlp", "--json").stdout)[0]["weights"]).items()}
        x = torch.tensor(list(idx(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"), 16)),
                         dtype=torch.float64).reshape(-1, 784) / 255
        y = torch.tensor(list(idx(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz"), 8)))
        h = torch.relu(x @ w["fc1.weight"].T + w["fc1.bias"])
        h = torch.relu(h @ w["fc2.weight"].T + w["fc2.bias"])
        logits = h @ w["fc3.weight"].T + w["fc3.bias"]
        top2 = logits.topk(2, dim=1).values
        ambiguous = int(((top2[:, 0] - top2[:, 1]).abs() < 1e-4).sum())
        print("samples within 1e-4 of a tie:", ambiguous)
        pred = logits.argmax(1)
        conf = torch.zeros(10, 10, dtype=torch.long)
        for t, p in zip(y.tolist(), pred.tolist()):
            conf[t, p] += 1
        diff = (torch.tensor(rep["confusion"]) - conf).abs().sum().item()
        self.assertLessEqual(diff, 2 * ambiguous, (rep["confusion"], conf))
        self.assertEqual(rep["samples"], 10000)
        for c in range(10):
            tp, p_all, t_all = conf[c, c].item(), conf[:, c].sum().item(), conf[c].sum().item()
            prec = tp / p_all if p_all else 0
            rec = tp / t_all if t_all else 0
            got = rep["classes"][c]
            # 6 significant digits in the JSON line
            tol = 2 * ambiguous / max(1, min(p_all, t_all)) + 1e-6
            self.assertAlmostEqual(got["precision"], prec, delta=tol)
            self.assertAlmostEqual(got["recall"], rec, delta=tol)
            self.assertEqual(got["support"], t_all)
        self.assertEqual(rep["classes"][0]["name"], "T-shirt/top")
        # top-5: fewer than 5 classes strictly above the true one
        above = (logits > logits.gather(1, y[:, None])).sum(1)
        self.assertAlmostEqual(rep["top_k_accuracy"], float((above < 5).double().mean()),
                               delta=ambiguous / 10000 + 1e-6)
        # ECE over 15 equal bins of the largest softmax probability
        prob = logits.softmax(1)
        cmax = prob.max(1).values
        bins = (cmax * 15).long().clamp(max=14)
        ece = 0.0
        for b in range(15):
            m = bins == b
            if m.any():
                ece += m.double().mean().item() * abs(
                    (pred[m] == y[m]).double().mean().item() - cmax[m].mean().item())
        self.assertAlmostEqual(rep["ece"], ece, delta=1e-5 + 2 * ambiguous / 10000)
        worst = rep["worst_mistakes"]
        self.assertEqual(len(worst), 32)
        wrong = (pred != y).nonzero().flatten()
        best = wrong[cmax[wrong].argsort(descending=True)][:5].tolist()
        self.assertEqual([m["index"] for m in worst[:5]], best)
        for m in worst:
            self.assertEqual(m["true"], int(y[m["index"]]))
            self.assertNotEqual(m["true"], m["pred"])
        kinds = self.e.sql("SELECT kind FROM artifacts WHERE run = 1")
        self.assertIn(("eval-report",), kinds)
        p = self.e.run("train", self.e.spec(), "--report")
        self.assertEqual(p.returncode, 2)
        self.assertIn("'ember eval' option", p.stderr)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
