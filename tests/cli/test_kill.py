"""The kill test: `ember train` is SIGKILLed at random points (at least 20),
and after every kill the registry and the checkpoints must be whole:

- Python's sqlite3 opens registry.db and PRAGMA integrity_check says ok;
- every checkpoint row names an existing file with the recorded size and
  SHA-256 that parses as safetensors (never a torn file, never a *.tmp);

then the run is resumed (`--resume latest`, or started again when no
checkpoint was recorded yet), and that process may be killed again. When
a chain of runs finally completes, its weights must equal those of an
uninterrupted run bit for bit, and every run of the chain that was killed
must show status "killed" (the store marks it so when the registry is
next opened for writing).

The delays are drawn from a seeded generator; the seed is printed (set
EMBER_KILL_SEED to replay one). The model is fmnist-mlp on the synthetic
dataset (no files to load, so the kills land in training and in
checkpoint writes rather than in data loading), 3 epochs, a checkpoint
every 5 steps, 2 threads (a sanitizer build trains less: 2 epochs of 512
samples in batches of 32, a checkpoint every 4 steps).

usage: test_kill.py EMBER SOURCE_ROOT
"""
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from cli_util import Ember, check_no_crash, same_weights, sanitized

EMBER = SOURCE = None
SANITIZED = False
KILLS = int(os.environ.get("EMBER_KILLS", "20"))
BUDGET_S = 240  # the whole test, a bound well above what it needs (60 s here, 2 cores)


class Kill(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-kill-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def args(self, e):
        if SANITIZED:  # a debug build under ASan trains ~100x slower: fewer, smaller steps
            return [e.spec(), "--dataset", "synthetic", "--epochs", "2", "--limit", "512",
                    "--batch", "32", "--checkpoint-every", "4", "--threads", "2", "--seed", "3",
                    "--quiet"]
        return [e.spec(), "--dataset", "synthetic", "--epochs", "3", "--checkpoint-every", "5",
                "--threads", "2", "--seed", "3", "--quiet"]

    def has_checkpoint(self, e):
        if not os.path.exists(e.db):
            return False
        try:
            return bool(e.sql("SELECT 1 FROM checkpoints LIMIT 1"))
        except sqlite3.OperationalError:  # killed before the schema was made
            return False

    def last_status(self, e):
        try:
            rows = e.sql("SELECT status FROM runs ORDER BY id DESC LIMIT 1")
        except sqlite3.OperationalError:
            return None
        return rows[0][0] if rows else None

    def check_after_kill(self, e):
        if not os.path.exists(e.db):
            return 0
        self.assertEqual(e.integrity(), "ok")
        try:
            rows = e.check_checkpoints_whole()
        except sqlite3.OperationalError as x:
            if "no such table" in str(x):
                return 0
            raise
        return len(rows)

    def test_sigkill_anywhere_then_resume(self):
        seed = int(os.environ.get("EMBER_KILL_SEED", str(random.SystemRandom().randrange(1 << 30))))
        print("kill test seed: %d (EMBER_KILL_SEED=%d replays it)" % (seed, seed), file=sys.stderr)
        rng = random.Random(seed)
        t_begin = time.time()

        ref_e = Ember(EMBER, SOURCE, os.path.join(self.tmp, "ref-home"))
        ref = os.path.join(self.tmp, "ref.safetensors")
        ref_e.train(*self.args(ref_e), "--no-record", "--save", ref, "--checkpoint-dir",
                    os.path.join(self.tmp, "ref-checkpoints"))
        self.assertFalse(os.path.exists(ref_e.home), "--no-record made a registry")
        self.assertTrue(os.listdir(os.path.join(self.tmp, "ref-checkpoints")))
        # one recorded, uninterrupted run: how long a whole process takes
        probe = Ember(EMBER, SOURCE, os.path.join(self.tmp, "probe-home"))
        t0 = time.time()
        probe.train(*self.args(probe), "--save", os.path.join(self.tmp, "probe.safetensors"))
        full = time.time() - t0
        same, why = same_weights(ref, os.path.join(self.tmp, "probe.safetensors"))
        self.assertTrue(same, "recording changed the weights: " + why)
        print("an uninterrupted recorded run takes %.2fs" % full, file=sys.stderr)

        kills = chains = attempts = 0
        max_rows = 0
        while kills < KILLS:
            self.assertLess(time.time() - t_begin, BUDGET_S, "the kill test ran out of time "
                            "(seed %d, %d kills)" % (seed, kills))
            chains += 1
            e = Ember(EMBER, SOURCE, os.path.join(self.tmp, "home-%d" % chains))
            out = os.path.join(self.tmp, "out-%d.safetensors" % chains)
            chain_kills = 0
            while True:
                attempts += 1
                self.assertLess(attempts, 40 * KILLS, "no chain completes (seed %d)" % seed)
                if self.has_checkpoint(e):
                    cmd = ["train", "--resume", "latest", "--save", out, "--quiet"]
                else:
                    cmd = ["train"] + self.args(e) + ["--save", out]
                p = e.popen(*cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                delay = rng.uniform(0.0, 1.1 * full)
                try:
                    p.wait(timeout=delay)
                    finished = True
                except subprocess.TimeoutExpired:
                    p.send_signal(signal.SIGKILL)
                    finished = False
                o, err = p.communicate(timeout=120)
                if finished or p.returncode != -signal.SIGKILL:
                    check_no_crash(p.returncode, err)
                    self.assertEqual(p.returncode, 0, "%s (seed %d):\n%s" % (cmd, seed, err))
                    break
                kills += 1
                chain_kills += 1
                max_rows = max(max_rows, self.check_after_kill(e))
                if self.last_status(e) == "completed":
                    break  # killed after it finished: --save was written before that

            # the chain completed: same weights as never stopping
            same, why = same_weights(ref, out)
            self.assertTrue(same, "chain %d (seed %d, %d kills): %s" % (chains, seed, chain_kills,
                                                                       why))
            statuses = e.sql("SELECT id, status FROM runs ORDER BY id")
            self.assertEqual(statuses[-1][1], "completed", statuses)
            for rid, st in statuses[:-1]:
                self.assertEqual(st, "killed", "run %d of chain %d: %s (seed %d)" %
                                 (rid, chains, statuses, seed))
            self.assertEqual(e.integrity(), "ok")
            e.check_checkpoints_whole()
        print("kill test: %d kills over %d chains (%d processes) in %.0fs; up to %d checkpoint "
              "rows checked at a time" % (kills, chains, attempts, time.time() - t_begin,
                                          max_rows), file=sys.stderr)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    SANITIZED = sanitized(EMBER)
    unittest.main(argv=[sys.argv[0], "-v"])
