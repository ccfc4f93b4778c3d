#!/usr/bin/python3
"""bench-serve-wrk.py: keep-alive throughput and latency of `ember serve`'s
POST /v2/models/NAME/infer under wrk (a C load generator: every connection
kept alive), for one or more ember binaries in the same session, runs
interleaved (A B A B ...) so that a machine's drift hits each alike; alone
and beside hostile clients that keep garbage request lines, slow heads and
oversized bodies coming, on new connections and on kept-alive ones after a
good request. Prints each run and the medians (req/s, p50/p99, and the
server's CPU time per request, which the cores' other work blurs less);
exits 1 if a normal request failed (wrk's socket errors or non-2xx
answers).

usage: bench-serve-wrk.py SPEC EMBER [EMBER...] [--runs 3] [--seconds 5]
                          [--connections 16] [--label NAME ...]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '%s'
"""


def infer_body(rows=1):
    return ('{"inputs":[{"name":"input","shape":[%d,1,28,28],"datatype":"FP32","data":[%s]}]}'
            % (rows, ",".join(["0.5"] * (784 * rows))))


class Server:
    def __init__(self, ember, spec, weights, env):
        self.p = subprocess.Popen([ember, "serve", spec, "--weights", weights, "--threads", "1",
                                   "--port", "0"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        m = re.search(r"http://([0-9.]+):(\d+)", self.p.stdout.readline())
        if not m:
            self.p.kill()
            raise SystemExit("%s serve: no ready line" % ember)
        self.host, self.port = m.group(1), int(m.group(2))

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)


def hostile(srv, stop, counts):
    """Threads that keep bad clients coming until stop is set."""
    def connect():
        return socket.create_connection((srv.host, srv.port), timeout=5)

    def drain(so, limit):
        so.settimeout(limit)
        try:
            while so.recv(65536):
                pass
        except OSError:
            pass

    def good_first(so):  # one good request, its answer read: the connection is kept alive
        so.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: a\r\n\r\n")
        so.settimeout(5)
        got = b""
        while not got.endswith(b"true}"):
            d = so.recv(4096)
            if not d:
                break
            got += d

    def garbage(kept):
        while not stop.is_set():
            try:
                with connect() as so:
                    if kept:
                        good_first(so)
                    so.sendall(b"\x00\x01\x02\xff\r\n\r\n")
                    drain(so, 2)
            except OSError:
                pass
            counts["garbage"] += 1
            stop.wait(0.05)

    def slow(kept):
        while not stop.is_set():
            try:
                with connect() as so:
                    if kept:
                        good_first(so)
                    for ch in b"GET /v2/health/live HTTP/1.1\r\nHost: a\r\n" * 10:
                        if stop.is_set():
                            break
                        so.sendall(bytes([ch]))
                        stop.wait(0.3)
            except OSError:  # cut at the header deadline
                pass
            counts["slow"] += 1

    def big(kept):  # past the 8 MiB cap, 2 MiB/s
        size = 9 << 20
        while not stop.is_set():
            try:
                with connect() as so:
                    if kept:
                        good_first(so)
                    so.sendall(b"POST /v2/models/fmnist-mlp/infer HTTP/1.1\r\nHost: a\r\n"
                               b"Content-Length: %d\r\n\r\n" % size)
                    sent = 0
                    while sent < size and not stop.is_set():
                        so.sendall(b"0" * 65536)
                        sent += 65536
                        stop.wait(0.03)
                    drain(so, 2)
            except OSError:
                pass
            counts["big"] += 1

    threads = []
    for kept in (False, True):
        threads += [threading.Thread(target=garbage, args=(kept,)),
                    threading.Thread(target=slow, args=(kept,)),
                    threading.Thread(target=slow, args=(kept,)),
                    threading.Thread(target=big, args=(kept,))]
    for t in threads:
        t.start()
    return threads


def cpu_seconds(pid):
    """user + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(srv, lua, seconds, connections):
    cpu0 = cpu_seconds(srv.p.pid)
    out = subprocess.run(["wrk", "-t1", "-c%d" % connections, "-d%ds" % seconds, "--latency",
                          "-s", lua, "http://%s:%d/v2/models/fmnist-mlp/infer"
                          % (srv.host, srv.port)], capture_output=True, text=True,
                         timeout=seconds + 60).stdout

    def lat(pct):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % pct, out, re.M)
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    cpu = cpu_seconds(srv.p.pid) - cpu0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors += int(m.group(1)) if m else 0
    # the server's CPU per request: what the relay adds, less blurred than req/s
    # when other work shares the cores (hostile clients' own requests count in it)
    return {"rps": rps, "p50": lat(50), "p99": lat(99), "errors": errors,
            "cpu_us": cpu / max(total, 1) * 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("embers", nargs="+")
    ap.add_argument("--label", action="append")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=16)
    a = ap.parse_args()
    labels = a.label or a.embers
    tmp = tempfile.mkdtemp(prefix="ember-bench-wrk-")
    env = dict(os.environ, EMBER_HOME=os.path.join(tmp, "home"))
    weights = os.path.join(tmp, "w.safetensors")
    subprocess.run([a.embers[0], "train", a.spec, "--epochs", "0", "--dataset", "synthetic",
                    "--save", weights, "--quiet"], env=env, check=True, capture_output=True)
    lua = os.path.join(tmp, "post.lua")
    with open(lua, "w") as f:
        f.write(LUA % infer_body())
    results = {}
    failed = False
    for run in range(a.runs):
        for hostile_on in (False, True):
            for label, ember in zip(labels, a.embers):
                srv = Server(ember, a.spec, weights, env)
                stop, counts, threads = threading.Event(), {"garbage": 0, "slow": 0, "big": 0}, []
                try:
                    if hostile_on:
                        threads = hostile(srv, stop, counts)
                        time.sleep(0.5)
                    r = run_wrk(srv, lua, a.seconds, a.connections)
                finally:
                    stop.set()
                    for t in threads:
                        t.join()
                    srv.stop()
                key = (label, hostile_on)
                results.setdefault(key, []).append(r)
                failed |= r["errors"] > 0
                print("run %d %-10s %-8s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  "
                      "server CPU %5.0f us/req  errors %d%s"
                      % (run + 1, label, "hostile" if hostile_on else "alone", r["rps"], r["p50"],
                         r["p99"], r["cpu_us"], r["errors"],
                         "  %s" % counts if hostile_on else ""), flush=True)
    print("\nmedians of %d runs (%d connections kept alive, %d s each, wrk -t1):" %
          (a.runs, a.connections, a.seconds))
    print("%-10s %-8s %10s %9s %9s %14s %7s" % ("binary", "clients", "req/s", "p50 ms",
                                                 "p99 ms", "CPU us/req", "errors"))
    for (label, hostile_on), rs in results.items():
        print("%-10s %-8s %10.0f %9.2f %9.2f %14.0f %7d" % (
            label, "hostile" if hostile_on else "alone",
            statistics.median(r["rps"] for r in rs), statistics.median(r["p50"] for r in rs),
            statistics.median(r["p99"] for r in rs), statistics.median(r["cpu_us"] for r in rs),
            sum(r["errors"] for r in rs)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
