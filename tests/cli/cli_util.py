"""cli_util.py: what the registry CLI tests share.

- Ember: runs the `ember` program with EMBER_HOME set to a test's own
  folder (a test never touches the user's registry), and fails a test on
  any crash or sanitizer report whatever the exit status.
- Registry: reads the registry with Python's own sqlite3 (an independent
  reader): integrity, run statuses, checkpoint rows, and checks that every
  recorded checkpoint file is whole (size, SHA-256, a parseable
  safetensors file, never a *.tmp).
- same_weights: bit-for-bit comparison of two safetensors files' tensors.
"""
import hashlib
import json
import os
import sqlite3
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
# safetensors_io and torch are imported by the helpers that read tensors
# (run those tests with /usr/bin/python3): Ember alone needs no torch, so
# tests/device/test_train_device.py uses it on machines without torch.

FMNIST = "/usr/share/datasets/fashion-mnist"
HAVE_DATA = os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))


def sanitized(exe):
    """True for a build with AddressSanitizer (a debug build, ~100x slower to
    train): tests then train on less data."""
    with open(exe, "rb") as f:
        return b"__asan_init" in f.read()


class Ember:
    def __init__(self, exe, source, home):
        self.exe, self.source, self.home = exe, source, home
        self.env = dict(os.environ)
        self.env["EMBER_HOME"] = home
        self.env.pop("XDG_DATA_HOME", None)

    def spec(self, name="fmnist-mlp.json"):
        return os.path.join(self.source, "data", "models", name)

    def run(self, *args, timeout=600):
        p = subprocess.run([self.exe] + [str(a) for a in args], capture_output=True, text=True,
                           timeout=timeout, env=self.env)
        check_no_crash(p.returncode, p.stderr)
        return p

    def ok(self, *args, **kw):
        p = self.run(*args, **kw)
        assert p.returncode == 0, "ember %s failed (%d):\n%s" % (
            " ".join(map(str, args)), p.returncode, p.stderr[-3000:])
        return p

    def json(self, *args):
        return json.loads(self.ok(*args).stdout)

    def train(self, *args):
        """`ember train ...` that must succeed; returns its JSON summary line."""
        p = self.ok("train", *args)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def popen(self, *args, **kw):
        return subprocess.Popen([self.exe] + [str(a) for a in args], env=self.env, **kw)

    # --- the registry, read by Python's sqlite3 -----------------------------
    @property
    def db(self):
        return os.path.join(self.home, "registry.db")

    def sql(self, query, *params):
        con = sqlite3.connect(self.db, timeout=30)
        try:
            return con.execute(query, params).fetchall()
        finally:
            con.close()

    def integrity(self):
        return self.sql("PRAGMA integrity_check")[0][0]

    def status(self, run):
        rows = self.sql("SELECT status FROM runs WHERE id = ?", run)
        return rows[0][0] if rows else None

    def checkpoints(self, run=None):
        q = ("SELECT c.run, c.step, c.kind, a.rel_path, a.size, a.sha256 FROM checkpoints c "
             "JOIN artifacts a ON a.id = c.artifact")
        rows = self.sql(q + (" WHERE c.run = ?" if run else "") + " ORDER BY c.run, c.step, c.id",
                        *([run] if run else []))
        out = []
        for r, step, kind, rel, size, sha in rows:
            path = rel if os.path.isabs(rel) else os.path.join(self.home, "artifacts", rel)
            out.append({"run": r, "step": step, "kind": kind, "path": path, "size": size,
                        "sha256": sha})
        return out

    def check_checkpoints_whole(self):
        """Every checkpoint row names an existing, whole, parseable file."""
        rows = self.checkpoints()
        for c in rows:
            assert not c["path"].endswith(".tmp"), "a row names a temporary file: %s" % c
            assert os.path.exists(c["path"]), "checkpoint file missing: %s" % c
            assert os.path.getsize(c["path"]) == c["size"], "size differs: %s" % c
            assert sha256_file(c["path"]) == c["sha256"], "SHA-256 differs: %s" % c
            import safetensors_io
            safetensors_io.load(c["path"])  # raises on a torn file
        return rows


def check_no_crash(returncode, stderr):
    # A signal (negative code) or a sanitizer report is a crash, whatever the test.
    assert returncode >= 0, "ember crashed with signal %d: %s" % (-returncode, stderr[-2000:])
    assert "Sanitizer" not in stderr, stderr[-4000:]
    assert "runtime error" not in stderr, stderr[-4000:]
    assert "internal error" not in stderr, stderr[-2000:]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_tensors(path):
    """The model's tensors of a weights file or a checkpoint (no optimiser state)."""
    import safetensors_io
    t = safetensors_io.load(path)
    return {k: v for k, v in t.items() if not k.startswith("optim/")}


def raw(t):
    import torch
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def same_weights(a, b):
    """(True, "") when a and b hold the same model tensors, bit for bit."""
    ta, tb = model_tensors(a), model_tensors(b)
    if set(ta) != set(tb):
        return False, "tensor names differ: %s vs %s" % (sorted(ta), sorted(tb))
    for k in ta:
        x, y = ta[k], tb[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False, "%s: dtype/shape differ" % k
        if raw(x) != raw(y):
            diff = (x.double() - y.double()).abs().max().item()
            return False, "%s differs (max |diff| %g)" % (k, diff)
    return True, ""
