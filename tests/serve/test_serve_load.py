"""`ember serve` under a bounded loopback load (wrk, a C load generator:
2 threads, 4 connections, 3 s a run, every request with its own id):
a 10% canary answers its share and no request fails; a canary that
cannot meet its latency objective (p99 under 1 us) is rolled back during
the load, and still no request fails: the switch drops nothing. The
split's cost in throughput is measured by tests/bench/bench-serve-canary.py,
not here (timings are no test).

usage: test_serve_load.py EMBER SOURCE_ROOT   (skips without wrk)
"""
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

EMBER = SOURCE = None
HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "bench_serve_canary", os.path.join(HERE, "..", "bench", "bench-serve-canary.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # its wrk script, serve() and version_counts()


@unittest.skipUnless(shutil.which("wrk"), "wrk is not installed (apt-get install wrk)")
class LoadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ember-load-")
        cls.env = dict(os.environ, EMBER_HOME=os.path.join(cls.tmp, "home"))
        cls.env.pop("XDG_DATA_HOME", None)
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        for seed in (1, 2):
            bench.ok(EMBER, cls.env, "train", spec, "--dataset", "synthetic", "--epochs", "1",
                     "--seed", str(seed), "--threads", "1", "--quiet")
            bench.ok(EMBER, cls.env, "model", "register", str(seed), "--name", "mlp")
        bench.ok(EMBER, cls.env, "model", "promote", "mlp", "1", "--alias", "production")
        cls.lua = os.path.join(cls.tmp, "ids.lua")
        with open(cls.lua, "w") as f:
            f.write(bench.LUA)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def load(self, url, seconds=3):
        w = subprocess.run(["wrk", "-t2", "-c4", "-d%ds" % seconds, "-s", self.lua, url],
                           capture_output=True, text=True, timeout=seconds + 60)
        m = re.search(r"RESULT (\d+) (\d+) (\d+)", w.stdout)
        self.assertIsNotNone(m, w.stdout + w.stderr)
        return tuple(map(int, m.groups()))  # requests, socket errors, non-2xx

    def metric(self, url, name):
        text = urllib.request.urlopen(url + "/metrics").read().decode()
        m = re.search(r"^%s (\S+)$" % name, text, re.M)
        return float(m.group(1))

    def test_canary_share_under_load(self):
        p, url = bench.serve(EMBER, self.env, ["--canary", "2:10%"])
        try:
            req, sock, status = self.load(url)
            counts = bench.version_counts(url)
        finally:
            p.terminate()
            self.assertEqual(p.wait(timeout=30), 0)
        self.assertEqual((sock, status), (0, 0), "requests failed under load")
        self.assertGreater(req, 200)
        n = counts["stable"] + counts["canary"]
        self.assertLessEqual(abs(n - req), 8)  # wrk counts what it saw answered
        share = counts["canary"] / n
        # a hash of random ids: binomial, sd sqrt(p (1 - p) / n); 5 sd
        self.assertLess(abs(share - 0.1), 5 * math.sqrt(0.09 / n), (share, n))

    def test_slow_canary_rolled_back_under_load(self):
        p, url = bench.serve(EMBER, self.env, ["--canary", "2:50%", "--slo-p99-ms", "0.001",
                                               "--slo-min-requests", "20", "--slo-window-s", "5"])
        try:
            req, sock, status = self.load(url)
            rollbacks = self.metric(url, "ember_serve_canary_rollbacks_total")
            share = self.metric(url, "ember_serve_canary_share")
            before = bench.version_counts(url)["canary"]
            self.load(url, seconds=1)
            after = bench.version_counts(url)["canary"]
        finally:
            p.terminate()
            self.assertEqual(p.wait(timeout=30), 0)
        self.assertEqual((sock, status), (0, 0), "requests failed during the switch")
        self.assertEqual((rollbacks, share), (1, 0))
        self.assertEqual(after, before, "the rolled-back canary still took requests")


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    sys.argv[1:] = sys.argv[3:]
    unittest.main(verbosity=2)
