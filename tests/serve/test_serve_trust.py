"""`ember serve` against hostile or broken clients: one bad connection
does not hold up the others, and what the server keeps for clients
(connections, bodies in flight, time) is bounded. Also: a failed reload
is retried. Weights are the spec's initial ones (`ember train --epochs 0
--save`): the answers' values are not what is tested here.

usage: test_serve_trust.py EMBER SOURCE_ROOT
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

EMBER = SOURCE = None


def infer_body(rows=1):
    return json.dumps({"inputs": [{"name": "input", "shape": [rows, 1, 28, 28],
                                   "datatype": "FP32", "data": [0.5] * (784 * rows)}]}).encode()


def post(body, model="fmnist-mlp", extra=b""):
    return (b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n%s\r\n"
            % (model.encode(), len(body), extra)) + body


def read_all(so, limit=10):
    """Everything until EOF (or limit seconds): bytes."""
    so.settimeout(limit)
    out = b""
    try:
        while True:
            d = so.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    return out


class Server:
    def __init__(self, env, *args):
        self.p = subprocess.Popen([EMBER, "serve", *args, "--port", "0"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"http://([0-9.]+):(\d+)", line)
        if not m:
            self.p.kill()
            raise AssertionError("no ready line: %r\n%s" % (line, self.p.stderr.read()))
        self.host, self.port = m.group(1), int(m.group(2))

    def connect(self):
        return socket.create_connection((self.host, self.port), timeout=10)

    def exchange(self, data, half_close=True, limit=10):
        with self.connect() as so:
            so.sendall(data)
            if half_close:
                so.shutdown(socket.SHUT_WR)
            return read_all(so, limit)

    def get(self, path):
        return self.exchange(b"GET %s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
                             % path.encode())

    def metrics(self):
        out = self.get("/metrics")
        return out.partition(b"\r\n\r\n")[2].decode()

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
        try:
            _, err = self.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            _, err = self.p.communicate()
        return self.p.returncode, err


def status_lines(raw):
    return re.findall(rb"HTTP/1\.[01] \d{3}[^\r\n]*", raw)


class TrustTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ember-serve-trust-")
        cls.env = dict(os.environ, EMBER_HOME=os.path.join(cls.tmp, "home"))
        cls.env.pop("XDG_DATA_HOME", None)
        cls.spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        cls.weights = os.path.join(cls.tmp, "w.safetensors")
        p = subprocess.run([EMBER, "train", cls.spec, "--epochs", "0", "--dataset", "synthetic",
                            "--save", cls.weights, "--quiet"], env=cls.env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def serve(self, *args):
        srv = Server(self.env, self.spec, "--weights", self.weights, "--threads", "1", *args)
        self.addCleanup(self.check_stop, srv)
        return srv

    def check_stop(self, srv):
        rc, err = srv.stop()
        self.assertEqual(rc, 0, err)

    # ---- one bad client does not hold up the others ----------------------------------
    def test_half_closed_posts_answered_while_others_sit_open(self):
        # an open connection of another client (a garbage request line, a
        # request's headers half sent) on the same event thread made most
        # half-closed POSTs lose their answers: libmicrohttpd read the EOF
        # of a resumed connection before it queued its answer
        for threads in ("1", "2"):
            srv = self.serve("--http-threads", threads)
            hold = [srv.connect(), srv.connect()]
            hold[0].sendall(b"\x00\x01\x02\xff\r\n\r\n")
            hold[1].sendall(b"GET /v2/health/live HTTP/1.1\r\n")
            time.sleep(0.2)
            body = infer_body()
            got = [status_lines(srv.exchange(post(body)))[:1] for _ in range(10)]
            self.assertEqual(got, [[b"HTTP/1.1 200 OK"]] * 10, threads)
            for so in hold:
                so.close()

    # ---- what the server holds for clients is bounded --------------------------------
    def test_body_budget_503_with_retry_after(self):
        # 300 kB bodies, 700 kB for all in flight: two are held, a third is refused
        srv = self.serve("--max-body-bytes", "300000", "--body-budget-bytes", "700000")
        body = infer_body(80)[:290000]  # the size is what counts, not the JSON
        held = []
        for _ in range(2):  # headers and the first byte only: each reserves its length
            so = srv.connect()
            so.sendall(post(body)[:-len(body) + 1])
            held.append(so)
        time.sleep(0.3)
        raw = srv.exchange(post(body))
        self.assertEqual(status_lines(raw), [b"HTTP/1.1 503 Service Unavailable"], raw[:300])
        self.assertIn(b"\r\nRetry-After: 1\r\n", raw)
        self.assertIn(b"--body-budget-bytes", raw)
        # waiting for "100 Continue": refused before the body
        with srv.connect() as so:
            so.sendall(post(b"", extra=b"Expect: 100-continue\r\n").replace(
                b"Content-Length: 0", b"Content-Length: 290000"))
            so.settimeout(10)
            self.assertTrue(so.recv(100).startswith(b"HTTP/1.1 503 "))
        # over the per-request limit: 413, whatever the budget
        raw = srv.exchange(post(infer_body(100)))
        self.assertEqual(status_lines(raw)[:1], [b"HTTP/1.1 413 Content Too Large"])
        # the budget comes back as bodies end: the held ones finish (400: not JSON) and a
        # full-size body goes through
        for so in held:
            so.sendall(body[1:])
            so.shutdown(socket.SHUT_WR)
            self.assertEqual(status_lines(read_all(so))[:1], [b"HTTP/1.1 400 Bad Request"])
            so.close()
        raw = srv.exchange(post(body))
        self.assertEqual(status_lines(raw)[:1], [b"HTTP/1.1 400 Bad Request"])
        self.assertEqual(status_lines(srv.exchange(post(infer_body())))[:1],
                         [b"HTTP/1.1 200 OK"])
        # a budget no bigger than one body at the cap: refused at the start
        p = subprocess.run([EMBER, "serve", self.spec, "--weights", self.weights,
                            "--max-body-bytes", "1000", "--body-budget-bytes", "1000", "--port",
                            "0"], env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--body-budget-bytes", p.stderr)

    # ---- reload ----------------------------------------------------------------------
    def test_failed_reload_retried_after_the_file_is_fixed(self):
        env = dict(self.env, EMBER_HOME=os.path.join(self.tmp, "reg"))

        def ok(*args):
            p = subprocess.run([EMBER, *args], env=env, capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout

        for seed in (1, 2):
            ok("train", self.spec, "--epochs", "1", "--dataset", "synthetic", "--seed", str(seed),
               "--threads", "1", "--quiet")
            ok("model", "register", str(seed), "--name", "mlp")
        weights = {v["version"]: v["weights"]
                   for v in json.loads(ok("model", "versions", "mlp", "--json"))}
        ok("model", "promote", "mlp", "1", "--alias", "production")
        srv = Server(env, "mlp@production", "--poll-ms", "100", "--threads", "1")
        self.addCleanup(self.check_stop, srv)

        def metric(name):
            m = re.search(r"^%s (\S+)$" % name, srv.metrics(), re.M)
            return float(m.group(1)) if m else None

        def version():
            raw = srv.get("/v2/models/mlp")
            return json.loads(raw.partition(b"\r\n\r\n")[2])["versions"][0]

        good = open(weights[2], "rb").read()
        os.chmod(weights[2], 0o644)
        with open(weights[2], "wb") as f:  # version 2's file damaged
            f.write(good[:100])
        ok("model", "promote", "mlp", "2", "--alias", "production")
        t0 = time.time()
        while time.time() - t0 < 10 and (metric("ember_serve_reload_retry_attempts") or 0) < 2:
            time.sleep(0.1)
        self.assertGreaterEqual(metric("ember_serve_reload_retry_attempts"), 2)  # retried
        self.assertEqual(version(), "1")  # the old one keeps serving
        self.assertGreater(metric("ember_serve_reload_last_failure_timestamp_seconds"),
                           time.time() - 60)
        self.assertGreater(metric("ember_serve_reload_next_retry_timestamp_seconds"),
                           time.time() - 1)
        with open(weights[2], "wb") as f:  # fixed: the next try loads it
            f.write(good)
        t0 = time.time()
        while time.time() - t0 < 15 and version() != "2":
            time.sleep(0.1)
        self.assertEqual(version(), "2")
        self.assertEqual(metric("ember_serve_reload_retry_attempts"), 0)
        self.assertEqual(metric("ember_serve_reload_next_retry_timestamp_seconds"), 0)
        self.assertEqual(metric("ember_serve_reloads_total"), 1)
        self.assertGreaterEqual(metric("ember_serve_reload_failures_total"), 2)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
