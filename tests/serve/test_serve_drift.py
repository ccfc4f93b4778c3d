"""Drift detection, offline (`ember drift`) and live (`ember serve`'s drift
gauges): a version registered from a Fashion-MNIST run keeps a reference of
its training inputs; the test set's images stay quiet against it, inverted
and noised ones do not, in the command's figures and exit status, on the
server's /metrics (within the judge's second) and as "drift" / "drift-end"
rows in `ember model history`. The figures are checked against a plain
NumPy-free recomputation from the recorded reference (PSI over its deciles).

usage: test_serve_drift.py EMBER SOURCE_ROOT
"""
import gzip
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import test_serve  # noqa: E402  (its Server and metrics parser)

EMBER = SOURCE = None
FMNIST = "/usr/share/datasets/fashion-mnist"
N = 600  # test images per set: a window of 500 plus some


def read_test_images(n):
    raw = gzip.open(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")).read()
    return bytearray(raw[16:16 + n * 784])


def write_idx(path, pixels, n):
    with open(path, "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(pixels))


class DriftTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ember-drift-")
        cls.env = dict(os.environ, EMBER_HOME=os.path.join(cls.tmp, "home"))
        cls.env.pop("XDG_DATA_HOME", None)
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        cls.ok("train", spec, "--epochs", "1", "--limit", "3000", "--threads", "1", "--quiet")
        p = cls.run_ember("model", "register", "1", "--name", "fm")
        assert p.returncode == 0 and "drift reference" not in p.stderr, p.stderr
        cls.ok("model", "promote", "fm", "1", "--alias", "production")
        px = read_test_images(N)
        rnd = random.Random(3)
        cls.sets = {
            "test": px,
            "inverted": bytearray(255 - b for b in px),
            "noised": bytearray(min(255, max(0, b + int(rnd.gauss(0, 60)))) for b in px),
        }
        for name, data in cls.sets.items():
            write_idx(os.path.join(cls.tmp, name + ".idx"), data, N)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def run_ember(cls, *args):
        return subprocess.run([EMBER, *args], env=cls.env, capture_output=True, text=True,
                              timeout=120)

    @classmethod
    def ok(cls, *args):
        p = cls.run_ember(*args)
        assert p.returncode == 0, "ember %s: %s" % (" ".join(args), p.stderr)
        return p.stdout

    def drift(self, name, *extra):
        p = self.run_ember("drift", "fm@production", os.path.join(self.tmp, name + ".idx"),
                           "--json", *extra)
        self.assertIn(p.returncode, (0, 3), p.stderr)
        return p.returncode, json.loads(p.stdout)

    def test_offline(self):
        rc, r = self.drift("test")
        self.assertEqual(rc, 0, r)
        self.assertFalse(r["drift"])
        self.assertEqual(r["samples"], N)
        self.assertEqual(r["reference_samples"], 2000)
        for f in r["features"]:
            self.assertLess(f["psi"], 0.1, f)  # (bins - 1)(1/600 + 1/2000) ~ 0.02 expected
        self.assertLess(r["prediction_js"], 0.05)
        for name in ("inverted", "noised"):
            rc, r = self.drift(name)
            self.assertEqual(rc, 3, r)
            self.assertTrue(r["drift"])
            self.assertGreater(max(f["psi"] for f in r["features"]), 0.25, r)
        rc, r = self.drift("inverted")
        mean = [f for f in r["features"] if f["feature"] == "c0_mean"][0]
        self.assertTrue(mean["drift"])
        self.assertGreater(mean["ks"], r["ks_critical"])
        # a limit past every figure: no drift, exit 0
        rc, r = self.drift("noised", "--psi", "100", "--js", "1")
        self.assertEqual(rc, 0, r)

    def test_offline_matches_the_reference(self):
        """PSI of c0_mean recomputed here from the recorded reference."""
        import sqlite3
        db = sqlite3.connect(os.path.join(self.env["EMBER_HOME"], "registry.db"))
        ref = json.loads(db.execute("SELECT reference_json FROM model_versions").fetchone()[0])
        db.close()
        feat = [f for f in ref["features"] if f["name"] == "c0_mean"][0]
        px = self.sets["inverted"]
        means = [sum(px[i * 784:(i + 1) * 784]) / 784 / 255 for i in range(N)]
        counts = [0] * 10
        for v in means:
            b = 0
            while b < 9 and v > feat["edges"][b]:
                b += 1
            counts[b] += 1
        psi = 0
        for b in range(10):
            live, r = max(counts[b] / N, 1e-4), max(feat["p"][b], 1e-4)
            psi += (live - r) * math.log(live / r)
        _, r = self.drift("inverted")
        got = [f for f in r["features"] if f["feature"] == "c0_mean"][0]["psi"]
        self.assertAlmostEqual(got, psi, delta=1e-3 * psi)  # float vs double pixel means

    def test_errors(self):
        p = self.run_ember("drift", "fm@production")
        self.assertEqual(p.returncode, 2)
        self.assertIn("INPUT", p.stderr)
        p = self.run_ember("drift", "fm@nope", os.path.join(self.tmp, "test.idx"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("no alias 'nope'", p.stderr)
        p = self.run_ember("drift", "fm@1", "--reference")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("built the drift reference of fm v1", p.stdout)
        p = self.run_ember("serve", os.path.join(SOURCE, "data", "models", "fmnist-mlp.json"),
                           "--weights", "x", "--drift-window", "10")
        self.assertEqual(p.returncode, 2)
        self.assertIn("registered version", p.stderr)

    def send(self, srv, name, count, batch=20):
        px = self.sets[name]
        for i0 in range(0, count, batch):
            n = min(batch, count - i0)
            rows = [[px[(i0 + k) * 784 + j] / 255.0 for j in range(784)] for k in range(n)]
            body = json.dumps({"inputs": [{"name": "input", "shape": [n, 1, 28, 28],
                                           "datatype": "FP32", "data": rows}]}).encode()
            st, r = srv.request("POST", "/v2/models/fm/infer", body,
                                {"Content-Type": "application/json"})
            self.assertEqual(st, 200, r)

    def gauges(self, srv):
        m, types = test_serve.parse_metrics(srv.metrics())
        if "ember_serve_drift_psi" in types:  # from the judge's first second on
            self.assertEqual(types["ember_serve_drift_psi"], "gauge")
        return m

    def wait_for(self, srv, detected, timeout=5):
        t0 = time.time()
        while time.time() - t0 < timeout:
            m = self.gauges(srv)
            key = ("ember_serve_drift_detected", 'role="stable",version="1"')
            if m.get(key) == detected:
                return m
            time.sleep(0.2)
        self.fail("drift_detected never became %d: %s" % (detected, m))

    def test_live(self):
        srv = test_serve.Server(self.env, "fm@production", "--workers", "1", "--threads", "1",
                                "--drift-window", "500")
        try:
            self.send(srv, "test", 300)
            m = self.wait_for(srv, 0)
            lab = 'role="stable",version="1"'
            self.assertEqual(m[("ember_serve_drift_window_samples", lab)], 300)
            for f in ("c0_mean", "c0_std"):
                self.assertLess(m[("ember_serve_drift_psi", lab + ',feature="%s"' % f)], 0.1)
            self.send(srv, "inverted", 500)  # the window now holds inverted images only
            m = self.wait_for(srv, 1)
            self.assertGreater(m[("ember_serve_drift_psi", lab + ',feature="c0_mean"')], 1)
            if shutil.which("promtool"):  # Prometheus's own reader accepts the exposition
                p = subprocess.run(["promtool", "check", "metrics"], input=srv.metrics(),
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(m[("ember_serve_drift_events_total", "")], 1)
            self.send(srv, "test", 500)  # and back
            self.wait_for(srv, 0)
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        self.assertIn("the inputs drifted: c0_mean PSI", err)
        hist = json.loads(self.ok("model", "history", "fm", "--json"))
        rows = [h for h in hist if h["action"].startswith("drift")]
        self.assertEqual([h["action"] for h in rows], ["drift", "drift-end"])
        self.assertIn("c0_mean PSI", rows[0]["detail"])
        self.assertEqual((rows[0]["from_version"], rows[0]["to_version"]), (1, 1))
        self.assertEqual(rows[0]["alias"], "production")

    def test_request_log(self):
        """Half of the requests logged, exactly; their ids, versions, statuses and
        classes as answered; inputs only when asked; FILE.1 past the size cap."""
        log = os.path.join(self.tmp, "requests.jsonl")
        srv = test_serve.Server(self.env, "fm@production", "--workers", "1", "--threads", "1",
                                "--request-log", log, "--request-log-sample", "0.5")
        px = self.sets["test"]
        answers = {}
        try:
            for k in range(40):
                row = [px[k * 784 + j] / 255.0 for j in range(784)]
                body = json.dumps({"id": "r%d" % k, "inputs": [{
                    "name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32",
                    "data": row}]}).encode()
                st, r = srv.request("POST", "/v2/models/fm/infer", body,
                                    {"Content-Type": "application/json"})
                self.assertEqual(st, 200, r)
                out = r["outputs"][0]["data"]
                answers["r%d" % k] = out.index(max(out))
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        lines = [json.loads(x) for x in open(log)]
        self.assertEqual(len(lines), 20)
        for e in lines:
            self.assertEqual((e["status"], e["version"], e["role"], e["rows"]),
                             (200, "1", "stable", 1))
            self.assertEqual(e["predicted"], [answers[e["id"]]])
            self.assertNotIn("input", e)
            self.assertGreater(e["latency_ms"], 0)
        os.remove(log)
        srv = test_serve.Server(self.env, "fm@production", "--workers", "1", "--threads", "1",
                                "--request-log", log, "--request-log-inputs",
                                "--request-log-max-mb", "1")
        try:
            self.send(srv, "test", 600, batch=5)  # 120 lines of 5 x 784 values: past 1 MiB
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(log + ".1"))
        self.assertGreaterEqual(os.path.getsize(log + ".1"), 1 << 20)
        first = json.loads(open(log + ".1").readline())
        self.assertEqual(len(first["input"]), 5 * 784)
        self.assertAlmostEqual(first["input"][200], px[200] / 255.0, places=6)
        # every line whole in both files; the newer under the cap plus a line (each
        # line ~40 KB: 120 of them rotated several times, the oldest dropped)
        for f in (log, log + ".1"):
            for line in open(f):
                json.loads(line)
        self.assertLess(os.path.getsize(log), (1 << 20) + 64 * 1024)
        p = self.run_ember("serve", "fm@production", "--request-log-inputs")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--request-log FILE", p.stderr)

    def test_promote_if_held(self):
        """`model promote --if-held`: a version that ran as a canary long enough without
        a rollback is promoted in one command; too short, never a canary: refused."""
        p = self.run_ember("model", "promote", "fm", "1", "--alias", "staging", "--if-held", "1s")
        self.assertEqual(p.returncode, 1)
        self.assertIn("never ran as a canary", p.stderr)
        srv = test_serve.Server(self.env, "fm@production", "--canary", "1:10%", "--workers", "1",
                                "--threads", "1")
        rc, err = srv.stop()
        self.assertEqual(rc, 0, err)
        p = self.run_ember("model", "promote", "fm", "1", "--alias", "staging", "--if-held", "2h")
        self.assertEqual(p.returncode, 1)
        self.assertIn("has run as a canary for", p.stderr)
        p = self.run_ember("model", "promote", "fm", "1", "--alias", "staging", "--if-held", "0s")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("staging -> v1", p.stdout)
        p = self.run_ember("model", "promote", "fm", "1", "--alias", "staging", "--if-held", "5x")
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    test_serve.EMBER, test_serve.SOURCE = EMBER, SOURCE
    sys.argv[1:] = sys.argv[3:]
    unittest.main(verbosity=2)
