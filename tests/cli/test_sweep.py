"""`ember sweep`: a grid sweep of four trials completes and its best trial
is the best of its runs; random and TPE samplers keep to their ranges;
a failing trial does not stop the sweep; pause and cancel reach a running
sweep through the registry; bad descriptions are refused with the key at
fault; the runner SIGKILLed at random points (seeded, several times) and
resumed ends with every trial trained exactly once (one fresh run per
trial, continuations only by --resume) and the registry intact; and on a
learning-rate grid whose best is clear, ASHA finds the grid's best trial
with at least 40% fewer training steps.

usage: test_sweep.py EMBER SOURCE_ROOT
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from cli_util import HAVE_DATA, Ember, check_no_crash

EMBER = SOURCE = None


class SweepTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-sweep-")
        self.e = Ember(EMBER, SOURCE, os.path.join(self.tmp, "home"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, desc, name="sweep.json"):
        desc.setdefault("spec", self.e.spec())
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            json.dump(desc, f)
        return path

    def status(self, sweep):
        return self.e.json("sweep", "status", str(sweep), "--json")

    def fresh_runs(self, sweep, number):
        return self.e.sql("SELECT id, parent_run FROM runs WHERE name = ? ORDER BY id",
                          "sweep-%d-trial-%d" % (sweep, number))

    def test_grid(self):
        path = self.write({"sampler": "grid", "metric": "test_accuracy", "direction": "maximize",
                           "parameters": {"training.lr": [0.01, 0.1],
                                          "training.batch_size": [64, 128]},
                           "training": {"dataset": "synthetic", "limit": 1000, "epochs": 1}})
        p = self.e.ok("sweep", "start", path, "--parallel", "2", "--json", "--quiet")
        s = json.loads(p.stdout)
        self.assertEqual(s["status"], "completed")
        trials = s["trials"]
        self.assertEqual([t["status"] for t in trials], ["completed"] * 4)
        combos = sorted((t["params"]["training.lr"], t["params"]["training.batch_size"])
                        for t in trials)
        self.assertEqual(combos, [(0.01, 64), (0.01, 128), (0.1, 64), (0.1, 128)])
        best = max(trials, key=lambda t: t["metric"])
        self.assertEqual(s["best_trial"], best["trial"])
        for t in trials:  # each trial is a run recorded with its settings
            cfg = json.loads(self.e.sql("SELECT config_json FROM runs WHERE id = ?", t["run"])[0][0])
            self.assertEqual(cfg["optim"]["lr"], t["params"]["training.lr"])
            self.assertEqual(cfg["batch_size"], t["params"]["training.batch_size"])
            acc = self.e.json("run", "show", str(t["run"]), "--json")["test_accuracy"]
            self.assertAlmostEqual(acc, t["metric"], places=6)
        listed = self.e.json("sweep", "list", "--json")
        self.assertEqual([x["status"] for x in listed], ["completed"])

    def test_samplers_keep_their_ranges(self):
        for sampler in ("random", "tpe"):
            path = self.write({"sampler": sampler, "trials": 7, "seed": 3,
                               "parameters": {
                                   "training.lr": {"low": 1e-3, "high": 0.3, "log": True},
                                   "nodes.fc1.out_features": {"low": 16, "high": 64, "int": True},
                                   "training.momentum": {"choice": [0.0, 0.9]}},
                               "training": {"dataset": "synthetic", "limit": 500, "epochs": 1}})
            s = json.loads(self.e.ok("sweep", "start", path, "--json", "--quiet",
                                     "--parallel", "2").stdout)
            self.assertEqual(len(s["trials"]), 7)
            for t in s["trials"]:
                prm = t["params"]
                self.assertTrue(1e-3 <= prm["training.lr"] <= 0.3, prm)
                self.assertIsInstance(prm["nodes.fc1.out_features"], int)
                self.assertTrue(16 <= prm["nodes.fc1.out_features"] <= 64, prm)
                self.assertIn(prm["training.momentum"], (0.0, 0.9))
                self.assertEqual(t["status"], "completed", t)
                spec = json.loads(self.e.sql("SELECT spec_json FROM runs WHERE id = ?",
                                             t["run"])[0][0])
                fc1 = [n for n in spec["nodes"] if n["name"] == "fc1"][0]
                self.assertEqual(fc1["out_features"], prm["nodes.fc1.out_features"])

    def test_failed_trial_does_not_stop_the_sweep(self):
        # a batch of 0 fails at the trial's start (the settings' range): the others go on
        path = self.write({"sampler": "grid", "parameters": {"training.batch_size": [0, 32]},
                           "training": {"dataset": "synthetic", "limit": 500, "epochs": 1}})
        s = json.loads(self.e.ok("sweep", "start", path, "--json", "--quiet").stdout)
        by = {t["params"]["training.batch_size"]: t for t in s["trials"]}
        self.assertEqual(by[0]["status"], "failed")
        self.assertIn("log", by[0]["decision"])
        self.assertEqual(by[32]["status"], "completed")
        self.assertEqual(s["status"], "completed")

    def test_bad_descriptions(self):
        cases = [
            ({"parameters": {"training.lr": [0.1]}, "samplr": "grid"}, "unknown key 'samplr'"),
            ({"parameters": {"training.lr": [0.1]}, "sampler": "bayes"}, "sampler: 'bayes'"),
            ({"parameters": {"training.lr": {"low": 0.1, "high": 1}}}, "the grid sampler takes lists"),
            ({"parameters": {"lr": [0.1]}}, "'lr' is not a training setting"),
            ({"parameters": {"training.lr": {"low": 0, "high": 1, "log": True}},
              "sampler": "random"}, "log-uniform: low must be > 0"),
            ({"parameters": {}}, "parameters: an object of 1 to 16"),
            ({"parameters": {"training.lr": [0.1]}, "spec": "/nonexistent.json"}, "cannot read"),
        ]
        for desc, msg in cases:
            p = self.e.run("sweep", "start", self.write(desc))
            self.assertNotEqual(p.returncode, 0, desc)
            self.assertIn(msg, p.stderr, desc)
        p = self.e.run("sweep", "status", "99")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no sweep 99", p.stderr)

    def count(self, query):
        try:
            return self.e.sql(query)[0][0]
        except Exception:  # the registry not made yet, or a table not migrated yet
            return 0

    def wait_for(self, cond, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if cond():
                return True
            time.sleep(0.1)
        return False

    def test_cancel_and_pause(self):
        path = self.write({"sampler": "grid", "parameters": {"training.lr": [0.01, 0.02, 0.03, 0.04]},
                           "training": {"dataset": "synthetic", "epochs": 200}})
        runner = self.e.popen("sweep", "start", path, "--quiet", stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        self.assertTrue(self.wait_for(lambda: self.count(
            "SELECT count(*) FROM runs WHERE status = 'running'") >= 1))
        self.e.ok("sweep", "cancel", "1")
        _, err = runner.communicate(timeout=120)
        check_no_crash(runner.returncode, err)
        s = self.status(1)
        self.assertEqual(s["status"], "cancelled")
        self.assertEqual(s["trials"][0]["status"], "cancelled")
        self.assertEqual(len(s["trials"]), 1)  # nothing started after the cancel
        self.assertEqual(self.e.sql("SELECT count(*) FROM runs WHERE status = 'running'")[0][0], 0)
        p = self.e.run("sweep", "resume", "1")
        self.assertEqual(p.returncode, 1)
        self.assertIn("is cancelled", p.stderr)

        path = self.write({"sampler": "grid", "parameters": {"training.lr": [0.01, 0.02, 0.03]},
                           "training": {"dataset": "synthetic", "limit": 2000, "epochs": 3}},
                          name="pause.json")
        runner = self.e.popen("sweep", "start", path, "--quiet", stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        self.assertTrue(self.wait_for(lambda: self.count(
            "SELECT count(*) FROM sweep_trials WHERE sweep = 2") >= 1))
        self.e.ok("sweep", "pause", "2")
        _, err = runner.communicate(timeout=120)  # its running trial ends, then it does
        self.assertEqual(runner.returncode, 0, err)
        s = self.status(2)
        self.assertEqual(s["status"], "paused")
        self.assertEqual(len(s["trials"]), 1)
        s = json.loads(self.e.ok("sweep", "resume", "2", "--json", "--quiet").stdout)
        self.assertEqual(s["status"], "completed")
        self.assertEqual([t["status"] for t in s["trials"]], ["completed"] * 3)

    def test_runner_killed_and_resumed(self):
        """SIGKILL the runner at seeded random points, resume, repeat: every trial
        trains exactly once (its runs: one fresh start, the rest --resume children)."""
        seed = int(os.environ.get("EMBER_KILL_SEED", random.randrange(1 << 30)))
        print("kill seed", seed)
        rnd = random.Random(seed)
        path = self.write({"sampler": "random", "trials": 8, "seed": 1,
                           "parameters": {"training.lr": {"low": 0.01, "high": 0.1, "log": True}},
                           "training": {"dataset": "synthetic", "limit": 3000, "epochs": 6}})
        args = ["sweep", "start", path, "--parallel", "2", "--quiet"]
        kills = 0
        for _ in range(4):
            runner = self.e.popen(*args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rnd.uniform(0.3, 1.2))
            if runner.poll() is not None:
                break
            runner.send_signal(signal.SIGKILL)
            runner.wait()
            kills += 1
            self.assertEqual(self.e.integrity(), "ok")
            args = ["sweep", "resume", "1", "--parallel", "2", "--quiet"]
        s = json.loads(self.e.ok("sweep", "resume", "1", "--json", "--quiet",
                                 "--parallel", "2").stdout) if runner.returncode != 0 else \
            self.status(1)
        self.assertGreaterEqual(kills, 2, "the runner ended before it could be killed twice")
        self.assertEqual(s["status"], "completed")
        self.assertEqual(sorted(t["trial"] for t in s["trials"]), list(range(8)))
        for t in s["trials"]:
            self.assertEqual(t["status"], "completed", t)
            runs = self.fresh_runs(1, t["trial"])
            fresh = [r for r in runs if not r[1]]
            self.assertEqual(len(fresh), 1, "trial %d started %d times: %s" % (
                t["trial"], len(fresh), runs))
            self.assertEqual(t["run"], runs[-1][0])
        self.assertEqual(self.e.integrity(), "ok")
        self.e.check_checkpoints_whole()

    def test_queue(self):
        """`ember queue SPEC...`: single runs as a sweep's trials (one per spec, each
        recorded under its spec's model), with common --training settings."""
        s = json.loads(self.e.ok("queue", self.e.spec(), self.e.spec("fmnist-cnn.json"),
                                 "--training", '{"dataset": "synthetic", "epochs": 1, '
                                 '"limit": 300}', "--parallel", "2", "--json",
                                 "--quiet").stdout)
        self.assertEqual([t["status"] for t in s["trials"]], ["completed"] * 2)
        models = [self.e.sql("SELECT model FROM runs WHERE id = ?", t["run"])[0][0]
                  for t in s["trials"]]
        self.assertEqual(models, ["fmnist-mlp", "fmnist-cnn"])
        p = self.e.run("queue", self.e.spec(), "--training", "[1]")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--training takes a JSON object", p.stderr)

    def test_early_stop(self):
        """--early-stop METRIC:N: with lr 0 the test loss never improves, so the run
        completes after 1 + N evaluations; stopped before that and resumed, it ends
        at the same step (the count is in its checkpoint); a sweep's trials take it
        from the "training" overrides."""
        base = ["train", self.e.spec(), "--dataset", "synthetic", "--epochs", "10", "--lr", "0",
                "--threads", "1", "--early-stop", "test_loss:2"]
        whole = json.loads(self.e.ok(*base, "--quiet").stdout.strip().splitlines()[-1])
        self.assertTrue(whole["early_stopped"])
        self.assertEqual(whole["epochs"], 3)
        self.assertEqual(self.e.status(whole["run_id"]), "completed")
        events = self.e.sql("SELECT count(*) FROM run_events WHERE run = ? AND detail LIKE "
                            "'early stop: test_loss has not improved for 2 evaluations%'",
                            whole["run_id"])
        self.assertEqual(events[0][0], 1)  # the run's record says why it ended there
        part = json.loads(self.e.ok(*base, "--quiet", "--stop-after-steps", "40").stdout
                          .strip().splitlines()[-1])
        self.assertTrue(part["stopped"])
        rest = json.loads(self.e.ok("train", "--resume", str(part["run_id"]), "--quiet").stdout
                          .strip().splitlines()[-1])
        self.assertTrue(rest["early_stopped"])
        self.assertEqual(rest["steps"], whole["steps"])
        p = self.e.run("train", self.e.spec(), "--early-stop", "loss:2", "--no-record")
        self.assertEqual(p.returncode, 2)
        self.assertIn("early_stop is 'loss:2'", p.stderr)
        path = self.write({"sampler": "grid", "parameters": {"training.lr": [0.0]},
                           "training": {"dataset": "synthetic", "epochs": 10,
                                        "early_stop": "test_loss:1"}})
        s = json.loads(self.e.ok("sweep", "start", path, "--json", "--quiet").stdout)
        self.assertEqual((s["trials"][0]["status"], s["trials"][0]["epochs"]), ("completed", 2))

    @unittest.skipUnless(HAVE_DATA, "needs Debian's dataset-fashion-mnist")
    def test_asha_saves_steps(self):
        """A learning-rate grid with a clear best (fmnist-mlp, SGD with momentum,
        20,000 samples, 9 epochs): ASHA (rungs at epochs 1, 3, 9; keep the top third)
        picks the same trial as the full grid with at least 40% fewer steps."""
        grid = {"training.lr": [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.1, 1.0]}
        full = self.write({"sampler": "grid", "parameters": grid,
                           "training": {"limit": 20000, "epochs": 9}}, name="full.json")
        asha = self.write({"sampler": "grid", "parameters": grid,
                           "pruner": {"type": "asha", "min_epochs": 1, "reduction": 3},
                           "training": {"limit": 20000, "epochs": 9}}, name="asha.json")
        a = json.loads(self.e.ok("sweep", "start", full, "--json", "--quiet",
                                 "--parallel", "2").stdout)
        b = json.loads(self.e.ok("sweep", "start", asha, "--json", "--quiet",
                                 "--parallel", "2").stdout)
        lr = lambda s: [t for t in s["trials"] if t["trial"] == s["best_trial"]][0]["params"]
        self.assertEqual(lr(a), lr(b))
        pruned = [t for t in b["trials"] if t["status"] == "pruned"]
        self.assertGreater(len(pruned), 0)
        for t in pruned:
            self.assertIn("ASHA keeps the top", t["decision"])
        saved = 1 - b["steps"] / a["steps"]
        print("ASHA: %d steps against the full grid's %d (%.1f%% fewer); best %s" % (
            b["steps"], a["steps"], 100 * saved, lr(b)))
        self.assertGreaterEqual(saved, 0.40)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
