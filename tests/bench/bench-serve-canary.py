#!/usr/bin/python3
"""bench-serve-canary.py: what a canary costs `ember serve`: keep-alive
throughput and latency under wrk (a C load generator) of NAME@production
alone and with `--canary 2:PCT%`, runs interleaved (A B A B ...) so that a
machine's drift hits both alike. Each wrk request carries its own "id"
(a counter in wrk's Lua), so the split is the hash-placed one clients with
ids get. Prints each run, the medians (req/s, p50/p95/p99 from wrk's
latency distribution) and the canary's share as the server counted it
(/metrics, per version); exits 1 when a request failed (wrk's socket
errors or non-2xx answers).

usage: bench-serve-canary.py EMBER [--runs 5] [--seconds 5] [--connections 8] [--share 10]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "models",
                    "fmnist-mlp.json")

LUA = r"""
local n = 0
local pixels = string.rep("0.5,", 783) .. "0.5"
request = function()
  n = n + 1
  local body = '{"id":"c' .. n .. '-' .. math.random(1000000) .. '","inputs":[{"name":"input",'
    .. '"shape":[1,1,28,28],"datatype":"FP32","data":[' .. pixels .. ']}]}'
  return wrk.format("POST", "/v2/models/mlp/infer", {["Content-Type"] = "application/json"}, body)
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %d %d %d %d\n", summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, latency:percentile(50), latency:percentile(95), latency:percentile(99),
    summary.duration))
end
"""


def ok(ember, env, *args):
    p = subprocess.run([ember, *args], env=env, capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise SystemExit("ember %s: %s" % (" ".join(args), p.stderr))
    return p.stdout


def serve(ember, env, extra):
    p = subprocess.Popen([ember, "serve", "mlp@production", "--port", "0", *extra], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"http://([0-9.]+):(\d+)", p.stdout.readline())
    if not m:
        p.kill()
        raise SystemExit("serve: no ready line")
    return p, "http://%s:%s" % (m.group(1), m.group(2))


def version_latency(url):
    """{role: (p50, p95, p99) in ms} from the server's per-version histogram
    (linear inside a bucket, as Prometheus's histogram_quantile)."""
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    buckets = {}
    for role, le, n in re.findall(r'^ember_serve_version_infer_duration_seconds_bucket\{role="(\w+)",'
                                  r'version="\d+",le="([^"]+)"\} (\S+)$', text, re.M):
        buckets.setdefault(role, []).append((float("inf") if le == "+Inf" else float(le), float(n)))
    out = {}
    for role, b in buckets.items():
        total, qs = b[-1][1], []
        for q in (0.5, 0.95, 0.99):
            rank, prev_le, prev = q * total, 0.0, 0.0
            for le, c in b:
                if c >= rank:
                    v = prev_le if le == float("inf") else prev_le + (le - prev_le) * (
                        (rank - prev) / (c - prev) if c > prev else 1)
                    qs.append(v * 1e3)
                    break
                prev_le, prev = le, c
        out[role] = tuple(qs) if total else (float("nan"),) * 3
    return out


def version_counts(url):
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    got = {}
    for role, v, n in re.findall(
            r'^ember_serve_version_requests_total\{role="(\w+)",version="(\d+)"\} (\S+)$', text,
            re.M):
        got[role] = float(n)
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ember")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--share", type=float, default=10)
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    tmp = tempfile.mkdtemp(prefix="ember-canary-bench-")
    env = dict(os.environ, EMBER_HOME=os.path.join(tmp, "home"))
    for seed in (1, 2):
        ok(a.ember, env, "train", SPEC, "--dataset", "synthetic", "--epochs", "1", "--seed",
           str(seed), "--threads", "1", "--quiet")
        ok(a.ember, env, "model", "register", str(seed), "--name", "mlp")
    ok(a.ember, env, "model", "promote", "mlp", "1", "--alias", "production")
    lua = os.path.join(tmp, "ids.lua")
    with open(lua, "w") as f:
        f.write(LUA)
    configs = [("stable alone", []), ("canary %g%%" % a.share, ["--canary", "2:%g%%" % a.share])]
    results = {name: [] for name, _ in configs}
    failed = False
    cores = os.cpu_count() or 2
    print("fmnist-mlp, one sample a request, wrk %d connections x 2 threads, %d s a run, %d "
          "cores, runs interleaved" % (a.connections, a.seconds, cores))
    for r in range(a.runs):
        for name, extra in configs:
            p, url = serve(a.ember, env, extra)
            try:
                w = subprocess.run(["wrk", "-t2", "-c%d" % a.connections, "-d%ds" % a.seconds,
                                    "-s", lua, url], capture_output=True, text=True,
                                   timeout=a.seconds + 60)
                m = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", w.stdout)
                if not m:
                    raise SystemExit("wrk gave no result: %s %s" % (w.stdout, w.stderr))
                req, sock, status, p50, p95, p99, dur = map(int, m.groups())
                share = version_counts(url)
                per_version = version_latency(url)
            finally:
                p.terminate()
                p.wait(timeout=30)
            failed |= sock > 0 or status > 0
            rate = req / (dur / 1e6)
            canary = share.get("canary", 0) / max(1.0, sum(share.values()))
            results[name].append((rate, p50 / 1e3, p95 / 1e3, p99 / 1e3, canary))
            print("  run %d %-14s %8.0f req/s  p50 %.2f ms  p95 %.2f ms  p99 %.2f ms  canary "
                  "share %.3f  errors %d" % (r + 1, name, rate, p50 / 1e3, p95 / 1e3, p99 / 1e3,
                                             canary, sock + status))
            for role, (a50, a95, a99) in sorted(per_version.items()):
                print("        %-7s %8.0f req/s  p50 %.2f ms  p95 %.2f ms  p99 %.2f ms (server's "
                      "histogram)" % (role, share.get(role, 0) / (dur / 1e6), a50, a95, a99))
    print("medians:")
    med = {}
    for name, _ in configs:
        cols = list(zip(*results[name]))
        med[name] = [statistics.median(c) for c in cols]
        print("  %-14s %8.0f req/s  p50 %.2f ms  p95 %.2f ms  p99 %.2f ms  canary share %.3f"
              % (name, *med[name]))
    base, with_canary = med[configs[0][0]][0], med[configs[1][0]][0]
    print("throughput with the canary / alone: %.3f (%.1f%% lower)" %
          (with_canary / base, 100 * (1 - with_canary / base)))
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
