"""`ember serve` as a client sees it: the Open Inference Protocol v2 over
HTTP (health, metadata, inference, the 4xx answers), /metrics in the
Prometheus text format, micro-batching (same answers as without), a
reload when the alias moves (promote, rollback) while a client keeps
sending, with no request failing, and a graceful stop on SIGTERM.

Expected outputs come from PyTorch on the same safetensors weights.
Two small models are trained on the synthetic set and registered as
versions 1 and 2 of "mlp" in a registry of the test's own (EMBER_HOME).
Run with Debian's /usr/bin/python3 (torch).

usage: test_serve.py EMBER SOURCE_ROOT
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import torch

EMBER = SOURCE = None
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import safetensors_io  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

TOL = 1e-4


def torch_logits(weights, x):
    """fmnist-mlp (784-256-128-10, ReLU) in PyTorch: x (N, 1, 28, 28) -> (N, 10)."""
    t = {k: v.double() for k, v in safetensors_io.load(weights).items()}
    h = x.double().reshape(x.shape[0], -1)
    h = torch.relu(h @ t["fc1.weight"].T + t["fc1.bias"])
    h = torch.relu(h @ t["fc2.weight"].T + t["fc2.bias"])
    return h @ t["fc3.weight"].T + t["fc3.bias"]


def sample_batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=g)


def infer_body(x, nested=False, **extra):
    data = (x.reshape(x.shape[0], -1).tolist() if nested == "rows"  # one flat list per row
            else x.tolist() if nested else x.reshape(-1).tolist())
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                        "data": data}]}
    body.update(extra)
    return json.dumps(body).encode()


class Server(ServeProcess):
    """An `ember serve` process, asked through urllib."""

    def __init__(self, env, *args):
        super().__init__(EMBER, env, *args)

    def request(self, method, path, body=None, headers=None, timeout=30):
        """(status, parsed body or text)."""
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        if "json" in ctype:
            return status, json.loads(raw)
        return status, raw.decode()

    def infer(self, x, model="mlp", **kw):
        return self.request("POST", "/v2/models/%s/infer" % model, infer_body(x, **kw),
                            {"Content-Type": "application/json"})

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200
        return text

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*=\"(\\.|[^\"\\])*\""
                    r"(,[a-zA-Z_][a-zA-Z0-9_]*=\"(\\.|[^\"\\])*\")*)?\})? "
                    r"([-+]?([0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|Inf|NaN))( -?\d+)?$")
HELP_TYPE = re.compile(r"^# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*|TYPE [a-zA-Z_:][a-zA-Z0-9_:]* "
                       r"(counter|gauge|histogram|summary|untyped))$")


def parse_metrics(text):
    """{(name, labels-text): value}; asserts every line is valid exposition syntax."""
    out, types = {}, {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("#"):
            assert HELP_TYPE.match(line), "bad comment line: %r" % line
            parts = line.split(" ")
            if parts[1] == "TYPE":
                assert parts[2] not in types, "TYPE twice for " + parts[2]
                types[parts[2]] = parts[3]
            continue
        m = SAMPLE.match(line)
        assert m, "bad sample line: %r" % line
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or base in types, "sample before its TYPE: %r" % line
        out[(name, m.group(3) or "")] = float(m.group(8))
    return out, types


class ServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ember-serve-")
        cls.env = dict(os.environ, EMBER_HOME=os.path.join(cls.tmp, "home"))
        cls.env.pop("XDG_DATA_HOME", None)
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        cls.spec = spec
        for seed in (1, 2):  # two runs, two different sets of weights
            cls.ok("train", spec, "--dataset", "synthetic", "--epochs", "1", "--seed", str(seed),
                   "--threads", "1", "--quiet")
            cls.ok("model", "register", str(seed), "--name", "mlp")
        versions = json.loads(cls.ok("model", "versions", "mlp", "--json"))
        cls.weights = {v["version"]: v["weights"] for v in versions}
        assert sorted(cls.weights) == [1, 2]
        cls.ok("model", "promote", "mlp", "1", "--alias", "production")
        cls.srv = Server(cls.env, "mlp@production", "--poll-ms", "100", "--max-batch", "16",
                         "--max-wait-ms", "5", "--max-body-bytes", "400000", "--workers", "1",
                         "--threads", "1")

    @classmethod
    def tearDownClass(cls):
        rc, err = cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, "serve exited %s:\n%s" % (rc, err)

    @classmethod
    def ok(cls, *args):
        p = subprocess.run([EMBER, *args], env=cls.env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, "ember %s: %s" % (" ".join(args), p.stderr)
        return p.stdout

    def assertClose(self, got, want):
        got = torch.tensor(got, dtype=torch.float64).reshape(want.shape)
        err = (got - want).abs().max().item()
        self.assertLess(err, TOL, "max |diff| %g" % err)

    # ---- endpoints ---------------------------------------------------------------
    def test_health_and_metadata(self):
        s = self.srv
        self.assertEqual(s.request("GET", "/v2/health/live"), (200, {"live": True}))
        self.assertEqual(s.request("GET", "/v2/health/ready"), (200, {"ready": True}))
        st, meta = s.request("GET", "/v2")
        self.assertEqual((st, meta["name"]), (200, "ember"))
        st, meta = s.request("GET", "/v2/models/mlp")
        self.assertEqual(st, 200)
        self.assertEqual(meta["name"], "mlp")
        self.assertEqual(meta["platform"], "ember")
        self.assertIn(meta["versions"], (["1"], ["2"]))
        self.assertEqual(meta["inputs"], [{"name": "input", "datatype": "FP32",
                                           "shape": [-1, 1, 28, 28]}])
        self.assertEqual(meta["outputs"], [{"name": "output", "datatype": "FP32",
                                            "shape": [-1, 10]}])
        v = meta["versions"][0]
        self.assertEqual(s.request("GET", "/v2/models/mlp/versions/%s" % v)[0], 200)
        self.assertEqual(s.request("GET", "/v2/models/mlp/ready"),
                         (200, {"name": "mlp", "ready": True}))
        self.assertEqual(s.request("GET", "/v2/models/mlp/versions/%s/ready" % v)[0], 200)
        for path in ("/v2/models/nope", "/v2/models/nope/ready", "/v2/models/mlp/versions/99",
                     "/v2/nothing", "/", "/v2/models/mlp/versions/99/ready"):
            st, body = s.request("GET", path)
            self.assertEqual(st, 404, path)
            self.assertIn("error", body)
        st, body = s.request("POST", "/v2/models/nope/infer", infer_body(sample_batch(1, 0)))
        self.assertEqual(st, 404)
        self.assertIn("nope", body["error"])

    def test_wrong_methods(self):
        s = self.srv
        for method, path in (("GET", "/v2/models/mlp/infer"), ("POST", "/v2/health/live"),
                             ("DELETE", "/v2/models/mlp"), ("PUT", "/metrics")):
            req = urllib.request.Request(s.url + path, method=method,
                                         data=b"{}" if method != "GET" else None)
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req, timeout=10)
            self.assertEqual(cm.exception.code, 405, path)
            self.assertTrue(cm.exception.headers.get("Allow"), path)
            self.assertIn("error", json.loads(cm.exception.read()))

    # ---- inference -----------------------------------------------------------------
    def served_version(self):
        return int(self.srv.request("GET", "/v2/models/mlp")[1]["versions"][0])

    def test_infer_matches_pytorch(self):
        s = self.srv
        x = sample_batch(5, 1)
        for nested in (False, True, "rows"):
            st, r = s.infer(x, nested=nested, id="req-7")
            self.assertEqual(st, 200, r)
            self.assertEqual((r["model_name"], r["id"]), ("mlp", "req-7"))
            want = torch_logits(self.weights[int(r["model_version"])], x)
            (o,) = r["outputs"]
            self.assertEqual((o["name"], o["datatype"], o["shape"]), ("output", "FP32", [5, 10]))
            self.assertClose(o["data"], want)
        # without an id: none in the answer; the versioned path
        v = self.served_version()
        st, r = s.request("POST", "/v2/models/mlp/versions/%d/infer" % v, infer_body(x[:1]))
        self.assertEqual(st, 200, r)
        self.assertNotIn("id", r)
        # other datatypes: FP64, UINT8 (integers) give the same as FP32 of those values
        xi = (x[:2] * 3).round()
        body = json.loads(infer_body(xi))
        for dt in ("FP64", "UINT8", "INT32"):
            body["inputs"][0]["datatype"] = dt
            body["inputs"][0]["data"] = [int(v) if dt != "FP64" else v
                                         for v in xi.reshape(-1).tolist()]
            st, r = s.request("POST", "/v2/models/mlp/infer", json.dumps(body).encode())
            self.assertEqual(st, 200, (dt, r))
            self.assertClose(r["outputs"][0]["data"],
                             torch_logits(self.weights[int(r["model_version"])], xi))
        # number forms and layout: the fast reader of "data" and jansson's (taken when the key
        # is escaped, "d\u0061ta") read the same values
        xs = x[:1].reshape(-1).tolist()
        texts = ["%d" % round(v) if i % 7 == 0 else ("%.6e" % v if i % 3 == 0 else "%.7f" % -v)
                 for i, v in enumerate(xs)]
        vals = torch.tensor([float(t) for t in texts]).reshape(1, 1, 28, 28)
        want = torch_logits(self.weights[self.served_version()], vals)
        for key in ("data", "d\\u0061ta"):
            raw = ('{"inputs": [ {"name":"input", "%s" :\n [ %s ] ,"shape":[1,1,28,28],'
                   '"datatype":"FP32"} ] }' % (key, " ,\n".join(texts))).encode()
            st, r = s.request("POST", "/v2/models/mlp/infer", raw)
            self.assertEqual(st, 200, (key, r))
            self.assertClose(r["outputs"][0]["data"], want)
        # the classification extension: top 3 "score:index", best first
        st, r = s.infer(x, outputs=[{"name": "output", "parameters": {"classification": 3}}])
        self.assertEqual(st, 200, r)
        o = r["outputs"][0]
        self.assertEqual((o["datatype"], o["shape"]), ("BYTES", [5, 3]))
        want = torch_logits(self.weights[int(r["model_version"])], x)
        top = want.topk(3, dim=1)
        for i, entry in enumerate(o["data"]):
            score, idx = entry.split(":")
            self.assertEqual(int(idx), top.indices[i // 3, i % 3].item())
            self.assertAlmostEqual(float(score), top.values[i // 3, i % 3].item(), delta=TOL)

    # ---- the binary tensor data extension -------------------------------------------
    def binary_request(self, header, payload=b"", path="/v2/models/mlp/infer", length=None):
        """POST a JSON header and raw bytes; (status, response headers, JSON, raw tail)."""
        head = json.dumps(header).encode()
        conn = http.client.HTTPConnection(self.srv.host, self.srv.port, timeout=30)
        conn.request("POST", path, head + payload,
                     {"Inference-Header-Content-Length": str(len(head) if length is None
                                                             else length),
                      "Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        raw = r.read()
        hl = r.getheader("Inference-Header-Content-Length")
        conn.close()
        n = int(hl) if hl is not None else len(raw)
        return r.status, hl, json.loads(raw[:n]), raw[n:]

    def test_binary_tensor_data(self):
        s = self.srv
        st, meta = s.request("GET", "/v2")
        self.assertIn("binary_tensor_data", meta["extensions"])
        x = sample_batch(3, 5)
        st, ref = s.infer(x, id="j")  # the JSON path
        self.assertEqual(st, 200, ref)
        want = torch.tensor(ref["outputs"][0]["data"], dtype=torch.float32)
        raw = x.numpy().astype("<f4").tobytes()
        inp = {"name": "input", "shape": [3, 1, 28, 28], "datatype": "FP32",
               "parameters": {"binary_data_size": len(raw)}}
        # binary in, JSON out: the same numbers
        st, hl, r, tail = self.binary_request({"id": "b1", "inputs": [inp]}, raw)
        self.assertEqual(st, 200, r)
        self.assertIsNone(hl)
        self.assertEqual(r["id"], "b1")
        self.assertEqual(torch.tensor(r["outputs"][0]["data"], dtype=torch.float32).tolist(),
                         want.tolist())
        # binary in and out: the output's FP32 bytes after the JSON, bit for bit the JSON
        # path's (its %.9g round-trips every float)
        out = [{"name": "output", "parameters": {"binary_data": True}}]
        for ask in ({"inputs": [inp], "outputs": out},
                    {"inputs": [inp], "parameters": {"binary_data_output": True}}):
            st, hl, r, tail = self.binary_request(ask, raw)
            self.assertEqual(st, 200, r)
            o = r["outputs"][0]
            self.assertEqual((o["datatype"], o["shape"]), ("FP32", [3, 10]))
            self.assertEqual(o["parameters"]["binary_data_size"], 3 * 10 * 4)
            self.assertNotIn("data", o)
            self.assertEqual(len(tail), 120)
            got = torch.frombuffer(bytearray(tail), dtype=torch.float32)
            self.assertEqual(got.tolist(), want.reshape(-1).tolist())
        # JSON in, binary out
        conn = http.client.HTTPConnection(s.host, s.port, timeout=30)
        conn.request("POST", "/v2/models/mlp/infer", infer_body(x, outputs=out))
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self.assertEqual(resp.status, 200)
        n = int(resp.getheader("Inference-Header-Content-Length"))
        self.assertEqual(torch.frombuffer(bytearray(body[n:]), dtype=torch.float32).tolist(),
                         want.reshape(-1).tolist())
        # images as bytes: UINT8 binary gives what UINT8 JSON gives
        xi = (x * 255).round()
        st, ju = s.request("POST", "/v2/models/mlp/infer", json.dumps(
            {"inputs": [{"name": "input", "shape": [3, 1, 28, 28], "datatype": "UINT8",
                         "data": [int(v) for v in xi.reshape(-1).tolist()]}]}).encode())
        self.assertEqual(st, 200, ju)
        u8 = bytes(int(v) for v in xi.reshape(-1).tolist())
        st, hl, r, tail = self.binary_request(
            {"inputs": [{"name": "input", "shape": [3, 1, 28, 28], "datatype": "UINT8",
                         "parameters": {"binary_data_size": len(u8)}}]}, u8)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["outputs"][0]["data"], ju["outputs"][0]["data"])
        # what is refused, each with its reason
        bad = [
            ({"inputs": [dict(inp, parameters={"binary_data_size": len(raw) - 4})]}, raw,
             "binary_data_size is"),
            ({"inputs": [dict(inp, shape=[2, 1, 28, 28])]}, raw, "needs"),
            (json.loads(infer_body(x)), raw, "no input takes binary data"),
            ({"inputs": [inp], "outputs": [{"name": "output", "parameters": {
                "binary_data": True, "classification": 2}}]}, raw, "classification"),
            ({"inputs": [dict(inp, data=[0.0])]}, raw, "not both"),
        ]
        for header, payload, why in bad:
            st, hl, r, tail = self.binary_request(header, payload)
            self.assertEqual(st, 400, (why, r))
            self.assertIn(why, r["error"])
        st, hl, r, tail = self.binary_request({"inputs": [inp]}, raw, length=10 ** 9)
        self.assertEqual(st, 400)
        self.assertIn("Inference-Header-Content-Length", r["error"])
        st, r = s.request("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [inp]}).encode())
        self.assertEqual(st, 400)
        self.assertIn("Inference-Header-Content-Length", r["error"])

    def test_bad_requests(self):
        s = self.srv
        good = json.loads(infer_body(sample_batch(2, 3)))

        def variant(**changes):
            b = json.loads(json.dumps(good))
            b["inputs"][0].update(changes)
            return json.dumps(b).encode()

        cases = [
            (b"{not json", "not valid JSON"),
            (variant(data=None).replace(b"null", b"[1,]"), "not valid JSON"),
            (variant(data=None).replace(b"null", b"[1 2]"), "not valid JSON"),
            (variant(data=None).replace(b"null", b"[01]"), "not valid JSON"),
            (variant(data=None).replace(b"null", b"[1.]"), "not valid JSON"),
            (variant(data=None).replace(b"null", b"[[1],,[2]]"), "not valid JSON"),
            (variant(data=None).replace(b"null", b"[1e999]"), "not valid JSON"),
            (variant(data=[[0.5] * 784, 1, 2]), "786 elements"),
            (variant(data=[0.5] * 784 + [None] * 784), "not a number"),
            (variant(data=[1e39] * 1568), "FP32"),
            (variant(data=[1e300] * 1568, datatype="FP64"), "does not fit FP32, the model's"),
            (variant(data=[3e38] * 1568), "far outside"),  # the output overflows: the input's doing
            (b"[1, 2]", "JSON object"),
            (json.dumps({"inputs": []}).encode(), "inputs"),
            (json.dumps(dict(good, extra=1)).encode(), "unknown key"),
            (variant(shape=[2, 784]), "shape"),
            (variant(shape=[2, 1, 28]), "shape"),
            (variant(shape=[0, 1, 28, 28], data=[]), "batch"),
            (variant(shape="x"), "shape"),
            (variant(datatype="BYTES"), "datatype"),
            (variant(datatype="fp32"), "datatype"),
            (variant(data=good["inputs"][0]["data"][:-1]), "elements"),
            (variant(data=good["inputs"][0]["data"] + [0.0]), "1569 elements"),
            (variant(data=["a"] * 1568), "not a number"),
            (variant(name="pixels"), "unknown input"),
            (variant(datatype="UINT8", data=[300] * 1568), "out of range"),
            (variant(datatype="INT32", data=[0.5] * 1568), "not an integer"),
            (json.dumps(dict(good, outputs=[{"name": "logits"}])).encode(), "unknown output"),
            (json.dumps(dict(good, outputs=[{"name": "output", "parameters":
                                             {"classification": 11}}])).encode(), "1 to 10"),
            (json.dumps(dict(good, id=5)).encode(), "id"),
            (json.dumps(dict(good, outputs=[{"name": "output"}, {"name": "output", "parameters":
                                             {"classification": 3}}])).encode(), "has one"),
            # a NUL where the fast reader skips a value (it looped on it)
            (b'{"a":[\x00],' + json.dumps(good).encode()[1:], "not valid JSON"),
            # a huge claimed batch with one value: refused before it is sized
            (variant(shape=[1 << 24, 1, 28, 28], data=[0.5]), "has 1 elements"),
            (variant(shape=[1 << 24, 1, 28, 28], data=[[0.5]]), "has 1 elements"),
            # nested data must be a block of the shape (the right count is not enough)
            (variant(data=[[0.5] * 700, [0.5] * 868]), "ragged"),
            (variant(data=[[0.5] * 1567, 0.5]), "ragged"),
            (variant(data=[[0.5] * 392] * 4), "lists of 4 at nesting level 0"),
            (variant(data=[[[0.5] * 28] * 28] * 2), "lists of 28 at nesting level 1"),
            (variant(data=[[[[[0.5]] * 28] * 28]] * 2), "deeper than shape"),
            (variant(data=[[0.5] * 700, [0.5] * 868]).replace(b'"data"', b'"d\\u0061ta"'),
             "ragged"),
            (variant(data=[[0.5] * 392] * 4).replace(b'"data"', b'"d\\u0061ta"'),
             "nesting level 0"),
        ]
        for body, needle in cases:
            st, r = s.request("POST", "/v2/models/mlp/infer", body)
            self.assertEqual(st, 400, (body[:80], r))
            self.assertIn(needle, r["error"], body[:80])
        # an error that quotes bytes that are not UTF-8 still says what is wrong
        st, r = s.request("GET", "/v2/models/%FF%FE")
        self.assertEqual(st, 404, r)
        self.assertIn("\ufffd", r["error"])
        st, r = s.request("GET", "/v2/models/a" + "%C3%A9" * 75)
        self.assertEqual(st, 404, r)
        self.assertIn("\u00e9\u00e9", r["error"])

    def test_body_cap(self):
        s = self.srv
        x = sample_batch(60, 4)  # ~1 MB of JSON, over the 400 kB cap
        body = infer_body(x)
        self.assertGreater(len(body), 400000)
        st, r = s.request("POST", "/v2/models/mlp/infer", body)
        self.assertEqual(st, 413)
        self.assertIn("limit", r["error"])
        # chunked (no Content-Length): refused too, as the body passes the cap
        conn = http.client.HTTPConnection(s.host, s.port, timeout=30)
        conn.request("POST", "/v2/models/mlp/infer",
                     body=iter([body[i:i + 65536] for i in range(0, len(body), 65536)]),
                     encode_chunked=True)
        resp = conn.getresponse()
        self.assertEqual(resp.status, 413)
        self.assertIn("limit", json.loads(resp.read())["error"])
        conn.close()
        # a request with more rows than --max-batch (16) but under the cap works
        x = sample_batch(20, 5)
        st, r = s.infer(x)
        self.assertEqual(st, 200, r)
        self.assertClose(r["outputs"][0]["data"],
                         torch_logits(self.weights[int(r["model_version"])], x))

    def raw(self, request):
        """Status line and body of one request sent byte for byte."""
        with socket.create_connection((self.srv.host, self.srv.port), timeout=30) as so:
            so.sendall(request)
            out = b""
            while True:
                d = so.recv(65536)
                if not d:
                    break
                out += d
        head, _, body = out.partition(b"\r\n\r\n")
        return head.split(b"\r\n")[0].decode(), body.decode()

    def test_request_framing(self):
        # %00 in a path is no path (it was decoded into a NUL that ended the
        # path early: "live%00x" was answered as "live")
        for path in (b"/v2/health/live%00x", b"/v2/models/mlp%00/ready"):
            status, body = self.raw(b"GET " + path + b" HTTP/1.1\r\nHost: a\r\n"
                                    b"Connection: close\r\n\r\n")
            self.assertIn(" 404 ", status, path)
            self.assertIn("error", json.loads(body))
        status, body = self.raw(b"GET /v2/health/%6Cive HTTP/1.1\r\nHost: a\r\n"
                                b"Connection: close\r\n\r\n")  # other escapes decode
        self.assertEqual(json.loads(body), {"live": True})
        # two Content-Lengths that differ: refused, whichever the body matches
        doc = b'{"inputs": []}'
        status, body = self.raw(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: a\r\n"
                                b"Content-Length: 14\r\nContent-Length: 5\r\n"
                                b"Connection: close\r\n\r\n" + doc)
        self.assertIn(" 400 ", status)
        self.assertIn("Content-Length", json.loads(body)["error"])
        # the same length twice is one length (RFC 9112): the request goes on
        status, body = self.raw(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: a\r\n"
                                b"Content-Length: 14\r\ncontent-length: 14\r\n"
                                b"Connection: close\r\n\r\n" + doc)
        self.assertIn(" 400 ", status)
        self.assertIn("inputs", json.loads(body)["error"])

    # ---- metrics -------------------------------------------------------------------------
    def test_metrics(self):
        s = self.srv
        before, types = parse_metrics(s.metrics())
        for name, kind in (("ember_serve_requests_total", "counter"),
                           ("ember_serve_errors_total", "counter"),
                           ("ember_serve_infer_duration_seconds", "histogram"),
                           ("ember_serve_batch_size", "histogram"),
                           ("ember_serve_queue_depth", "gauge"),
                           ("ember_serve_model_version", "gauge"),
                           ("ember_serve_reloads_total", "counter")):
            self.assertEqual(types.get(name), kind, name)
        for _ in range(3):
            self.assertEqual(s.infer(sample_batch(1, 9))[0], 200)
        self.assertEqual(s.request("POST", "/v2/models/mlp/infer", b"{")[0], 400)
        after, _ = parse_metrics(s.metrics())

        def get(d, name, labels=""):
            return d.get((name, labels), 0.0)

        ok = 'code="200"'
        self.assertGreaterEqual(get(after, "ember_serve_requests_total", ok),
                                get(before, "ember_serve_requests_total", ok) + 4)
        self.assertGreaterEqual(get(after, "ember_serve_errors_total"),
                                get(before, "ember_serve_errors_total") + 1)
        n = "ember_serve_infer_duration_seconds"
        self.assertGreaterEqual(get(after, n + "_count"), get(before, n + "_count") + 4)
        self.assertGreater(get(after, n + "_sum"), get(before, n + "_sum"))
        # buckets cumulative, +Inf = count
        for hist in (n, "ember_serve_batch_size"):
            buckets = sorted(((float(k[1].split('"')[1]), v) for k, v in after.items()
                              if k[0] == hist + "_bucket"), key=lambda t: t[0])
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), hist)
            self.assertEqual(buckets[-1][0], float("inf"))
            self.assertEqual(counts[-1], get(after, hist + "_count"))
        self.assertGreater(get(after, "ember_serve_batch_size_count"),
                           get(before, "ember_serve_batch_size_count"))
        self.assertEqual(get(after, "ember_serve_model_version", 'model="mlp"'),
                         self.served_version())

    # ---- batching ------------------------------------------------------------------------
    def test_batching_same_answers(self):
        unbatched = Server(self.env, self.spec, "--weights", self.weights[1], "--no-batching",
                           "--threads", "1")
        try:
            batched = Server(self.env, self.spec, "--weights", self.weights[1], "--max-batch",
                             "32", "--max-wait-ms", "20", "--threads", "1")
            try:
                xs = [sample_batch(1 + i % 3, 100 + i) for i in range(24)]
                results = {}

                def client(srv, key, idx):
                    for i in idx:
                        st, r = srv.infer(xs[i], model="fmnist-mlp")
                        results[(key, i)] = (st, r)

                for srv, key in ((unbatched, "off"), (batched, "on")):
                    ts = [threading.Thread(target=client, args=(srv, key, range(k, 24, 8)))
                          for k in range(8)]
                    for t in ts:
                        t.start()
                    for t in ts:
                        t.join()
                want_all = torch_logits(self.weights[1], torch.cat(xs))
                row = 0
                for i, x in enumerate(xs):
                    (s0, r0), (s1, r1) = results[("off", i)], results[("on", i)]
                    self.assertEqual((s0, s1), (200, 200), (r0, r1))
                    a = torch.tensor(r0["outputs"][0]["data"]).reshape(-1, 10)
                    b = torch.tensor(r1["outputs"][0]["data"]).reshape(-1, 10)
                    self.assertLess((a - b).abs().max().item(), 1e-5)
                    self.assertClose(b.tolist(), want_all[row:row + x.shape[0]])
                    row += x.shape[0]
                mb, _ = parse_metrics(batched.metrics())
                mu, _ = parse_metrics(unbatched.metrics())
                # batching on: fewer forwards than requests (several rows per forward)
                self.assertLess(mb[("ember_serve_batch_size_count", "")], 24)
                self.assertEqual(mb[("ember_serve_batch_size_sum", "")], 48)
                self.assertEqual(mu[("ember_serve_batch_size_count", "")], 48)  # one row each
            finally:
                rc, err = batched.stop(signal.SIGINT)
                self.assertEqual(rc, 0, err)
        finally:
            rc, err = unbatched.stop()
            self.assertEqual(rc, 0, err)

    # ---- canary --------------------------------------------------------------------------
    def test_canary_split(self):
        """--canary staging:30%: a request's id places it (the same id, the same version,
        every time); without an id the split is random; each answer is its version's;
        /metrics counts by version; /versions/V reaches either."""
        self.ok("model", "promote", "mlp", "2", "--alias", "staging")
        srv = Server(self.env, "mlp@production", "--canary", "staging:30%", "--workers", "1",
                     "--threads", "1", "--poll-ms", "100")
        try:
            x = sample_batch(1, 5)
            want = {v: torch_logits(w, x) for v, w in self.weights.items()}
            placed, answered = {}, {1: 0, 2: 0}
            for rnd in range(3):
                for k in range(100):
                    st, r = srv.infer(x, id="client-%d" % k)
                    self.assertEqual(st, 200, r)
                    v = int(r["model_version"])
                    self.assertEqual(r["model_name"], "mlp")
                    self.assertClose(r["outputs"][0]["data"], want[v])
                    self.assertEqual(placed.setdefault(k, v), v, "id client-%d moved" % k)
                    answered[v] += 1
            # 100 ids placed by a hash: binomial(100, 0.3), sd 4.6; 5 sd either side
            share = sum(1 for v in placed.values() if v == 2) / 100
            self.assertTrue(0.07 <= share <= 0.53, share)
            seen = {int(srv.infer(x)[1]["model_version"]) for _ in range(60)}
            self.assertEqual(seen, {1, 2})  # 0.7^60 and 0.3^60: never all one
            st, r = srv.request("POST", "/v2/models/mlp/versions/2/infer", infer_body(x, id="a"))
            self.assertEqual((st, r["model_version"]), (200, "2"))
            self.assertClose(r["outputs"][0]["data"], want[2])
            st, r = srv.request("POST", "/v2/models/mlp/versions/1/infer", infer_body(x, id="a"))
            self.assertEqual((st, r["model_version"]), (200, "1"))
            st, r = srv.request("POST", "/v2/models/mlp/versions/3/infer", infer_body(x))
            self.assertEqual(st, 404)
            self.assertIn("as its canary, version 2", r["error"])
            m, _ = parse_metrics(srv.metrics())
            n1 = m[("ember_serve_version_requests_total", 'role="stable",version="1"')]
            n2 = m[("ember_serve_version_requests_total", 'role="canary",version="2"')]
            self.assertEqual(n1 + n2, 300 + 60 + 2)  # the 404 reached no version
            self.assertGreaterEqual(n2, answered[2] + 1)
            self.assertEqual(m[("ember_serve_canary_share", "")], 0.3)
            self.assertEqual(m[("ember_serve_version_infer_duration_seconds_count",
                                'role="canary",version="2"')], n2)
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        # bad uses are refused before it starts
        for args, msg in ((("mlp@production", "--canary", "staging"), "REF:PERCENT"),
                          (("mlp@production", "--canary", "staging:120%"), "--canary's share"),
                          (("mlp@production", "--canary", "nosuch:10%"), "nosuch"),
                          ((self.spec, "--weights", self.weights[1], "--canary", "2:10%"),
                           "registered NAME@ALIAS")):
            p = subprocess.run([EMBER, "serve", *args, "--port", "0"], env=self.env,
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(msg, p.stderr)

    def test_canary_rollback(self):
        """A canary that breaks an objective gets no more traffic, at once, and the
        rollback is in the registry's history with its figures: faults (outputs that
        overflow) over an error-rate objective, and a latency objective it cannot meet."""
        srv = Server(self.env, "mlp@production", "--canary", "2:50%", "--slo-error-rate", "0.2",
                     "--slo-window-s", "5", "--slo-min-requests", "10", "--workers", "1",
                     "--threads", "1")
        try:
            x = sample_batch(1, 6)
            on_canary = [k for k in range(60)
                         if srv.infer(x, id="c%d" % k)[1]["model_version"] == "2"]
            self.assertGreater(len(on_canary), 5)
            huge = torch.full_like(x, 3.4e38)  # overflows to Inf and NaN: a fault of the version
            t0, switched = time.time(), None
            while time.time() - t0 < 10 and switched is None:
                for k in on_canary:
                    st, r = srv.infer(huge, id="c%d" % k)
                    if st == 200 and r["model_version"] == "1":
                        switched = time.time() - t0
                        break
                    self.assertEqual(st, 400, r)
                    st, r = srv.infer(x, id="c%d" % k)
                    self.assertEqual(st, 200, r)  # no request fails for the switch
                    if r["model_version"] == "1":
                        switched = time.time() - t0
                        break
            self.assertIsNotNone(switched, "the faulty canary kept its traffic")
            for k in on_canary:  # from now on the stable version answers every one
                st, r = srv.infer(x, id="c%d" % k)
                self.assertEqual((st, r["model_version"]), (200, "1"))
            m, _ = parse_metrics(srv.metrics())
            self.assertEqual(m[("ember_serve_canary_share", "")], 0)
            self.assertEqual(m[("ember_serve_canary_rollbacks_total", "")], 1)
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        self.assertIn("broke its objective: error rate", err)
        hist = json.loads(self.ok("model", "history", "mlp", "--json"))
        rows = [h for h in hist if h["action"].startswith("canary")]
        self.assertEqual([h["action"] for h in rows][-2:], ["canary-start", "canary-rollback"])
        self.assertIn("error rate", rows[-1]["detail"])
        self.assertEqual((rows[-1]["from_version"], rows[-1]["to_version"]), (2, 1))

        srv = Server(self.env, "mlp@production", "--canary", "2:50%", "--slo-p99-ms", "0.001",
                     "--slo-min-requests", "5", "--workers", "1", "--threads", "1")
        try:
            for k in range(200):
                self.assertEqual(srv.infer(x, id="d%d" % k)[0], 200)
            m, _ = parse_metrics(srv.metrics())
            self.assertEqual(m[("ember_serve_canary_rollbacks_total", "")], 1)
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        self.assertIn("p99 latency", err)
        p = subprocess.run([EMBER, "serve", "mlp@production", "--slo-p99-ms", "5", "--port", "0"],
                           env=self.env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("give --canary", p.stderr)

    def feedback(self, srv, body):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return srv.request("POST", "/v2/models/mlp/feedback", raw,
                           {"Content-Type": "application/json"})

    def test_feedback_accuracy(self):
        """Labels for answered requests: each version's accuracy on /metrics, the
        refusals, and a canary whose accuracy falls under --slo-min-accuracy rolled back."""
        srv = Server(self.env, "mlp@1", "--workers", "1", "--threads", "1")
        try:
            x = sample_batch(2, 8)
            st, r = srv.infer(x, id="f1")
            self.assertEqual(st, 200, r)
            out = torch.tensor(r["outputs"][0]["data"]).reshape(2, 10)
            pred = out.argmax(1).tolist()
            st, a = self.feedback(srv, {"id": "f1", "labels": [pred[0], (pred[1] + 1) % 10]})
            self.assertEqual(st, 200, a)
            self.assertEqual((a["labelled"], a["correct"], a["model_version"]), (2, 1, "1"))
            st, a = self.feedback(srv, {"id": "f1", "labels": pred})
            self.assertEqual(st, 409, a)
            st, a = self.feedback(srv, {"id": "nope", "labels": [1]})
            self.assertEqual(st, 404, a)
            self.assertIn("no answered request with id 'nope'", a["error"])
            srv.infer(x, id="f2")
            st, a = self.feedback(srv, {"id": "f2", "labels": [1]})
            self.assertEqual(st, 400, a)
            self.assertIn("had 2 rows: give 2 labels, not 1", a["error"])
            for bad in (b"{", {"id": "f2"}, {"id": "f2", "labels": [-1, 2]}):
                st, a = self.feedback(srv, bad)
                self.assertEqual(st, 400, a)
            st, _ = srv.request("GET", "/v2/models/mlp/feedback")
            self.assertEqual(st, 405)
            m, _ = parse_metrics(srv.metrics())
            lab = 'role="stable",version="1"'
            self.assertEqual(m[("ember_serve_version_feedback_total", lab)], 2)
            self.assertEqual(m[("ember_serve_version_correct_total", lab)], 1)
            self.assertEqual(m[("ember_serve_version_accuracy", lab)], 0.5)
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)

        srv = Server(self.env, "mlp@production", "--canary", "2:50%", "--slo-min-accuracy", "0.8",
                     "--slo-min-requests", "10", "--slo-window-s", "10", "--workers", "1",
                     "--threads", "1")
        try:
            x = sample_batch(1, 9)
            rolled = False
            for k in range(200):
                st, r = srv.infer(x, id="g%d" % k)
                self.assertEqual(st, 200, r)
                p = torch.tensor(r["outputs"][0]["data"]).argmax().item()
                wrong = r["model_version"] == "2"  # the canary is always wrong, the stable right
                st, a = self.feedback(srv, {"id": "g%d" % k, "labels": [(p + 1) % 10 if wrong else p]})
                self.assertEqual(st, 200, a)
                m, _ = parse_metrics(srv.metrics())
                if m[("ember_serve_canary_share", "")] == 0:
                    rolled = True
                    break
            self.assertTrue(rolled, "the inaccurate canary kept its traffic")
            self.assertEqual(m[("ember_serve_version_accuracy", 'role="stable",version="1"')], 1)
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)
        self.assertIn("accuracy 0.000 < 0.800", err)
        hist = json.loads(self.ok("model", "history", "mlp", "--json"))
        self.assertIn("accuracy", [h for h in hist if h["action"] == "canary-rollback"][-1]["detail"])
        p = subprocess.run([EMBER, "model", "promote", "mlp", "2", "--alias", "production",
                            "--if-held", "1s"], env=self.env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("was rolled back", p.stderr)

    # ---- reload --------------------------------------------------------------------------
    def test_reload_on_promote_and_rollback(self):
        s = self.srv
        x = sample_batch(2, 42)
        want = {v: torch_logits(w, x) for v, w in self.weights.items()}
        self.assertEqual(self.served_version(), 1)
        seen, failures, stop = [], [], threading.Event()

        def client():
            while not stop.is_set():
                try:
                    st, r = s.infer(x)
                except Exception as e:  # a dropped connection counts as a failure
                    failures.append(repr(e))
                    continue
                if st != 200:
                    failures.append((st, r))
                    continue
                v = int(r["model_version"])
                got = torch.tensor(r["outputs"][0]["data"], dtype=torch.float64).reshape(2, 10)
                seen.append((v, (got - want[v]).abs().max().item()))

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            def wait_for(version):
                t0 = time.time()
                while time.time() - t0 < 15:
                    if seen and seen[-1][0] == version and len(seen) > 5:
                        return
                    time.sleep(0.05)
                self.fail("the served version never became %d (seen %s)" %
                          (version, sorted(set(v for v, _ in seen))))

            time.sleep(0.3)
            self.ok("model", "promote", "mlp", "2", "--alias", "production")
            wait_for(2)
            n2 = len(seen)
            time.sleep(0.3)
            self.ok("model", "rollback", "mlp", "--alias", "production")
            wait_for(1)
            time.sleep(0.3)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(failures, [])
        versions = [v for v, _ in seen]
        self.assertIn(2, versions)
        self.assertEqual(versions[-1], 1)
        self.assertGreater(len(seen), n2)
        worst = max(d for _, d in seen)
        self.assertLess(worst, TOL, "an answer did not match its version's weights")
        m, _ = parse_metrics(s.metrics())
        self.assertGreaterEqual(m[("ember_serve_reloads_total", "")], 2)
        self.assertEqual(m[("ember_serve_model_version", 'model="mlp"')], 1)
        # the outputs of the two versions differ: the switch was real
        self.assertGreater((want[1] - want[2]).abs().max().item(), 1e-3)

    def test_quantized(self):
        srv = Server(self.env, self.spec, "--weights", self.weights[1], "--quantize", "int8",
                     "--threads", "1")
        try:
            x = sample_batch(8, 11)
            st, r = srv.infer(x, model="fmnist-mlp")
            self.assertEqual(st, 200, r)
            got = torch.tensor(r["outputs"][0]["data"], dtype=torch.float64).reshape(8, 10)
            want = torch_logits(self.weights[1], x)
            # int8 weights and activations: close to f32, not equal
            self.assertLess((got - want).abs().max().item(), 0.05 * want.abs().max().item())
            self.assertEqual(got.argmax(1).tolist(), want.argmax(1).tolist())
            # an input whose output overflows f32 is refused as in f32 (int8 answered 200
            # with the bias alone: its activations, infinite, were quantised to zero)
            x = torch.full((1, 1, 28, 28), 3e38)
            st, r = srv.infer(x, model="fmnist-mlp")
            self.assertEqual(st, 400, r)
            self.assertIn("NaN or Inf", r["error"])
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)

    # ---- stop ----------------------------------------------------------------------------
    def test_graceful_stop_and_usage(self):
        srv = Server(self.env, self.spec, "--weights", self.weights[2], "--max-wait-ms", "300",
                     "--threads", "1")
        x = sample_batch(3, 7)
        res = []
        t = threading.Thread(target=lambda: res.append(srv.infer(x, model="fmnist-mlp")))
        t.start()
        time.sleep(0.1)  # the request waits in the batcher (max wait 300 ms)
        rc, err = srv.stop(signal.SIGTERM)
        t.join()
        self.assertEqual(rc, 0, err)
        self.assertIn("stopped", err)
        self.assertEqual(res[0][0], 200, res)
        self.assertClose(res[0][1]["outputs"][0]["data"], torch_logits(self.weights[2], x))
        # a stop while many requests are still being read and parsed: each is
        # answered (200, or 503 once the server stopped admitting), exit 0
        # (one parsed during the stop used to reach the stopped batcher: abort)
        srv = Server(self.env, self.spec, "--weights", self.weights[2])
        body = infer_body(sample_batch(500, 8))
        codes = []

        def client():
            try:
                codes.append(srv.request("POST", "/v2/models/fmnist-mlp/infer", body,
                                         {"Content-Type": "application/json"}, timeout=60)[0])
            except (OSError, http.client.HTTPException) as e:
                codes.append(repr(e))
        ts = [threading.Thread(target=client) for _ in range(24)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        rc, err = srv.stop(signal.SIGTERM)
        for t in ts:
            t.join()
        self.assertEqual(rc, 0, err)
        self.assertTrue(set(codes) <= {200, 503}, codes)
        # too many compute threads for the cores: refused, with the reason
        cores = len(os.sched_getaffinity(0))
        p = subprocess.run([EMBER, "serve", self.spec, "--weights", self.weights[2],
                            "--workers", str(cores), "--threads", "2", "--port", "0"],
                           env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("cores", p.stderr)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
