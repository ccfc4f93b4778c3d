"""The registry from the command line, as a user drives it: `ember train`
records a run (metrics per step, epoch and evaluation, checkpoints, the
dataset's identity), `ember runs / run show / metrics / compare` read it
back (tables and --json / --csv), a stopped run resumes to exactly the
weights of an uninterrupted one (a deterministic stop with the hidden
--stop-after-steps flag, and a real Ctrl-C), readers never see "database
is locked" while a training records, and the model registry registers,
promotes, rolls back and collects garbage.

Every test has its own EMBER_HOME. Run with Debian's /usr/bin/python3
(torch reads the safetensors files).

usage: test_registry.py EMBER SOURCE_ROOT
"""
import csv
import hashlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from cli_util import HAVE_DATA, Ember, check_no_crash, same_weights, sanitized

EMBER = SOURCE = None
SANITIZED = False  # an ASan build: the long trainings use less data


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-reg-")
        self.e = Ember(EMBER, SOURCE, os.path.join(self.tmp, "home"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def assertSameWeights(self, a, b):
        same, why = same_weights(a, b)
        self.assertTrue(same, why)


@unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not installed")
class Recording(Base):
    def test_train_records_and_commands_read_it_back(self):
        e = self.e
        spec = e.spec()
        res = e.train(spec, "--epochs", "1", "--limit", "6000", "--seed", "1", "--threads", "2",
                      "--quiet")
        self.assertEqual(res["run_id"], 1)
        self.assertEqual(res["steps"], 47)  # ceil(6000 / 128)
        for k in ("record_enqueue_s", "record_commit_s"):
            self.assertGreaterEqual(res[k], 0.0)

        # ember runs: the run, its final accuracy; --json parses.
        p = e.ok("runs")
        self.assertIn("fmnist-mlp-1", p.stdout)
        self.assertIn("completed", p.stdout)
        self.assertIn("%.2f%%" % (100 * res["test_accuracy"]), p.stdout)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2)
        self.assertEqual(lines[0].index("STATUS"), lines[1].index("completed"))  # aligned
        runs = e.json("runs", "--json")
        self.assertEqual(len(runs), 1)
        r = runs[0]
        self.assertEqual((r["id"], r["name"], r["model"], r["status"], r["steps"]),
                         (1, "fmnist-mlp-1", "fmnist-mlp", "completed", 47))
        self.assertAlmostEqual(r["test_accuracy"], res["test_accuracy"], places=6)
        self.assertAlmostEqual(r["test_loss"], res["test_loss"], places=5)
        self.assertGreater(r["duration_s"], 0)
        self.assertEqual(e.json("runs", "--json", "--model", "nope"), [])
        self.assertEqual(len(e.json("runs", "--json", "--status", "completed", "--limit", "1")), 1)
        self.assertEqual(e.json("runs", "--json", "--status", "failed"), [])

        # ember metrics: one loss point per optimiser step.
        pts = e.json("metrics", "1", "loss", "--json")
        self.assertEqual([p["step"] for p in pts], list(range(1, 48)))
        self.assertTrue(all(p["value"] > 0 and p["wall"] > 1e9 for p in pts))
        for key in ("lr", "grad_norm"):
            self.assertEqual(len(e.json("metrics", "1", key, "--json")), 47)
        for key in ("test_accuracy", "test_loss", "train_loss", "samples_per_sec"):
            pts1 = e.json("metrics", "1", key, "--json")
            self.assertEqual([p["step"] for p in pts1], [47], key)
        acc = e.json("metrics", "1", "test_accuracy", "--json")[0]["value"]
        self.assertAlmostEqual(acc, res["test_accuracy"], places=6)
        rows = list(csv.DictReader(io.StringIO(e.ok("metrics", "latest", "loss", "--csv").stdout)))
        self.assertEqual(len(rows), 47)
        self.assertEqual(float(rows[0]["value"]), pts[0]["value"])  # full precision in CSV
        self.assertEqual(len(e.ok("metrics", "1", "loss").stdout.splitlines()), 48)

        # ember run show: lineage, config, checkpoints.
        show = e.json("run", "show", "1", "--json")
        with open(spec, "rb") as f:
            self.assertEqual(show["spec_sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(show["config"]["batch_size"], 128)
        self.assertEqual((show["seed"], show["threads"], show["device"]), (1, 2, "cpu"))
        self.assertRegex(show["engine_version"], r"^\d+\.\d+")
        # the CPU kernels that ran, as the train JSON line names them
        self.assertRegex(show["kernels"], r"^%s kernels \(processor [a-z0-9_]+(, capped by "
                         r"EMBER_CPU_ISA=[a-z0-9_]+)?\), OpenBLAS %s$" % (res["cpu_kernels"],
                                                                      res["blas_core"]))
        self.assertEqual(show["dataset"]["name"], "fashion-mnist")
        self.assertRegex(show["dataset"]["sha256"], "^[0-9a-f]{64}$")
        self.assertGreater(show["dataset"]["size"], 30_000_000)
        # ... and backwards: the runs on that dataset, of that spec.
        for flag, value in (("--dataset", "fashion-mnist"), ("--dataset", show["dataset"]["sha256"][:12]),
                            ("--spec", show["spec_sha256"][:12])):
            self.assertEqual([r["id"] for r in e.json("runs", "--json", flag, value)], [1], flag)
        self.assertEqual(e.json("runs", "--json", "--dataset", "cifar10"), [])
        kinds = [c["kind"] for c in show["checkpoints"]]
        self.assertIn("final", kinds)
        for c in show["checkpoints"]:
            self.assertTrue(os.path.exists(c["path"]), c)
            self.assertIn(os.path.join(e.home, "artifacts", "runs", "1"), c["path"])
        # the final checkpoint is the last evaluation's state: one file, two names
        by_kind = {c["kind"]: c for c in e.checkpoints(1)}
        fin, ev = os.stat(by_kind["final"]["path"]), os.stat(by_kind["eval"]["path"])
        self.assertEqual((fin.st_ino, fin.st_nlink), (ev.st_ino, 2))
        self.assertEqual(by_kind["final"]["sha256"], by_kind["eval"]["sha256"])
        e.check_checkpoints_whole()
        keys = {m["key"]: m for m in show["metrics"]}
        self.assertEqual(keys["loss"]["count"], 47)
        self.assertEqual(keys["loss"]["min"], min(p["value"] for p in pts))
        text = e.ok("run", "show", "1").stdout
        for needle in ("fmnist-mlp-1", "config", "metrics", "checkpoints", "final", "fashion-mnist",
                       "spec sha256", show["spec_sha256"], "kernels      " + show["kernels"]):
            self.assertIn(needle, text)
        e.check_checkpoints_whole()

        # tags and notes
        e.ok("run", "tag", "1", "team=vision")
        e.ok("run", "tag", "1", "team=vision-2")
        e.ok("run", "note", "1", "first", "try")
        ann = e.json("run", "show", "1", "--json")["annotations"]
        self.assertEqual([(a["kind"], a["key"], a["text"]) for a in ann],
                         [("tag", "team", "vision-2"), ("note", None, "first try")])
        self.assertIn("first try", e.ok("run", "show", "1").stdout)

        # a second run to compare: another lr and limit
        res2 = e.train(spec, "--epochs", "1", "--limit", "2000", "--lr", "0.05", "--seed", "1",
                       "--threads", "2", "--quiet", "--name", "slow-lr")
        self.assertEqual(res2["run_id"], 2)
        cmp = {r["key"]: r for r in e.json("compare", "1", "2", "--json")}
        self.assertEqual(cmp["name"]["run_2"], "slow-lr")
        self.assertEqual(cmp["config.optim.lr"]["run_1"], 0.1)
        self.assertEqual(cmp["config.optim.lr"]["run_2"], 0.05)
        self.assertEqual(cmp["config.limit"]["run_2"], 2000)
        self.assertNotIn("config.batch_size", cmp)  # the same in both: not shown
        self.assertAlmostEqual(cmp["test_accuracy (final)"]["run_1"], res["test_accuracy"], 6)
        self.assertEqual(cmp["loss (best, min)"]["run_1"], keys["loss"]["min"])
        text = e.ok("compare", "1", "2").stdout
        self.assertIn("RUN 1", text)
        self.assertIn("config.optim.lr", text)
        rows = list(csv.reader(io.StringIO(e.ok("compare", "1", "2", "--csv").stdout)))
        self.assertEqual(rows[0], ["key", "run_1", "run_2"])

        # delete
        e.ok("run", "delete", "2")
        self.assertEqual([r["id"] for r in e.json("runs", "--json")], [1])
        p = e.run("run", "show", "2")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no run 2", p.stderr)
        ckdir = os.path.join(e.home, "artifacts", "runs", "2", "checkpoints")
        left = [f for f in os.listdir(ckdir)] if os.path.isdir(ckdir) else []
        self.assertEqual([f for f in left if f.endswith(".safetensors")], [])
        self.assertEqual(e.integrity(), "ok")


@unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not installed")
class Accumulation(Base):
    def test_each_step_recorded_once_with_its_mean_loss(self):
        """With --accumulate 2 the recorded loss of a step is the mean of its two
        micro-batches' (it was the last one's), at that step only (the first
        micro-batch's loss was written at the step before, over that step's). With
        lr 0 the weights stay put, so a run without accumulation gives each
        micro-batch's loss."""
        e = self.e
        args = ["--dataset", "synthetic", "--epochs", "1", "--limit", "512", "--batch", "64",
                "--lr", "0", "--no-shuffle", "--threads", "1", "--quiet"]
        self.assertEqual(e.train(e.spec(), *args)["steps"], 8)
        self.assertEqual(e.train(e.spec(), *args, "--accumulate", "2")["steps"], 4)
        each = [p["value"] for p in e.json("metrics", "1", "loss", "--json")]
        steps = e.json("metrics", "2", "loss", "--json")
        self.assertEqual([p["step"] for p in steps], [1, 2, 3, 4])
        for k, p in enumerate(steps):
            self.assertAlmostEqual(p["value"], (each[2 * k] + each[2 * k + 1]) / 2, places=6)


class Resume(Base):
    ARGS = ["--epochs", "2", "--limit", "3000", "--seed", "5", "--threads", "2",
            "--checkpoint-every", "10", "--quiet"]

    def test_stopped_run_resumes_bit_identical(self):
        e = self.e
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        ra = e.train(e.spec(), *self.ARGS, "--save", a)
        self.assertEqual(ra["steps"], 48)
        # stop at step 30: mid-way through the second epoch (24 steps each)
        rs = e.train(e.spec(), *self.ARGS, "--stop-after-steps", "30", "--keep-checkpoints", "10")
        self.assertTrue(rs["stopped"])
        self.assertEqual(rs["steps"], 30)
        self.assertEqual(e.status(2), "stopped")
        steps = [(c["step"], c["kind"]) for c in e.checkpoints(2)]
        self.assertIn((30, "final"), steps)
        self.assertIn((20, "step"), steps)

        # settings cannot change on resume; the flag is named
        for bad, needle in ((["--lr", "0.5"], "--lr"), (["--epochs", "3"], "--epochs"),
                            (["--checkpoint-every", "3"], "--checkpoint-every")):
            p = e.run("train", "--resume", "2", *bad)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(needle, p.stderr)
        p = e.run("train", e.spec(), "--resume", "2")
        self.assertEqual(p.returncode, 2)
        self.assertIn("leave out SPEC", p.stderr)
        p = e.run("train", "--resume", "2", "--no-record")
        self.assertEqual(p.returncode, 2)
        p = e.run("train", "--resume", "1")  # completed: nothing to do
        self.assertEqual(p.returncode, 1)
        self.assertIn("completed", p.stderr)
        p = e.run("train", "--resume", "42")
        self.assertEqual(p.returncode, 1)
        self.assertIn("42", p.stderr)

        rb = e.train("--resume", "2", "--save", b, "--quiet")
        self.assertEqual(rb["run_id"], 3)
        self.assertFalse(rb["stopped"])
        self.assertSameWeights(a, b)
        self.assertAlmostEqual(rb["test_loss"], ra["test_loss"], places=12)
        show = e.json("run", "show", "3", "--json")
        self.assertEqual(show["parent_run"], 2)
        self.assertEqual(show["status"], "completed")
        self.assertEqual(show["config"], e.json("run", "show", "2", "--json")["config"])
        loss = e.json("metrics", "3", "loss", "--json")
        self.assertEqual([p["step"] for p in loss], list(range(31, 49)))
        ann2 = e.json("run", "show", "2", "--json")["annotations"]
        self.assertTrue(any(a["kind"] == "resumed" and "run 2 step 30" in a["text"]
                            for a in ann2), ann2)
        ann = e.json("run", "show", "3", "--json")["annotations"]
        self.assertIn(("resumed", 30, "resumed from run 2 step 30"),
                      [(a["kind"], a["step"], a["text"]) for a in ann])
        # run 2 again: another continuation of it, said (run 3 is where it got to)
        p = e.run("train", "--resume", "2", "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("run 2 was resumed before, as run 3", p.stderr)

    def test_resume_rolls_back_where_the_uninterrupted_run_does(self):
        """A divergence after a resume rolls back to the checkpoint the run had before
        it stopped, not to the stop's own "final" one (the uninterrupted run never wrote
        that: from it, one step back, rolling back would repeat the step, and the
        resumed run gave up where the uninterrupted one went on)."""
        e = self.e
        spec = json.load(open(e.spec()))
        spec["name"] = "mlp-boom"  # lr x200 at step 25: a spike at 27, infinities at 34
        spec["training"]["schedule"] = {"type": "step", "step_size": 25, "gamma": 200}
        path = self.path("boom.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        args = ["--epochs", "3", "--limit", "3000", "--checkpoint-every", "5", "--threads", "1",
                "--quiet"]
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        ra = e.train(path, *args, "--save", a)
        self.assertEqual(ra["steps"], 72)
        for stops in (["33"], ["29", "33"]):  # a chain too: its runs are searched
            e.train(path, *args, "--stop-after-steps", stops[0])
            for stop in stops[1:]:
                e.train("--resume", "latest", "--stop-after-steps", stop)
            rb = e.train("--resume", "latest", "--save", b)
            self.assertEqual(rb["steps"], 72, stops)
            self.assertSameWeights(a, b)

    def test_killed_run_records_the_checkpoints_its_writer_missed(self):
        """A process killed while its registry writer was behind leaves checkpoint files
        newer than its rows; the registry records the newest whole one when it finds the
        run killed, and --resume continues from there."""
        e = self.e
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        e.train(e.spec(), *self.ARGS, "--save", a)
        e.train(e.spec(), *self.ARGS, "--stop-after-steps", "40", "--keep-checkpoints", "10")
        ck = {(c["step"], c["kind"]): c for c in e.checkpoints(2)}
        self.assertIn((40, "final"), ck)
        self.assertIn((30, "step"), ck)
        # as if killed with the writer 20 steps behind: rows after step 20 never made it,
        # the run still says "running" under a process that is gone
        con = sqlite3.connect(e.db)
        with con:
            arts = [r[0] for r in con.execute(
                "SELECT artifact FROM checkpoints WHERE run = 2 AND step > 20")]
            con.execute("DELETE FROM checkpoints WHERE run = 2 AND step > 20")
            con.executemany("DELETE FROM artifacts WHERE id = ?", [(x,) for x in arts])
            con.execute("UPDATE runs SET status = 'running', ended = NULL, pid = 999999999, "
                        "pid_start = NULL WHERE id = 2")
        con.close()
        # the newest files (step 40) are damaged: one byte of their data flipped
        newest = ck[(40, "final")]["path"]
        with open(newest, "r+b") as f:
            f.seek(-9, os.SEEK_END)
            byte = f.read(1)
            f.seek(-9, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x40]))
        for c in ck.values():
            self.assertTrue(os.path.exists(c["path"]), c)
        # a file older than the run in its folder is another run's (one of a deleted run
        # whose id it was given): not looked at
        stranger = os.path.join(os.path.dirname(newest), "step-000000050.safetensors")
        shutil.copy(ck[(30, "step")]["path"], stranger)
        os.utime(stranger, (time.time() - 86400,) * 2)

        p = e.ok("gc")  # the first writing open finds the run killed (its files are new: kept)
        self.assertEqual(e.status(2), "killed")
        self.assertIn("final-step-000000040.safetensors", p.stderr)  # passed over, named
        self.assertIn("step-000000050.safetensors is not taken as the run's", p.stderr)
        self.assertNotIn(50, [c["step"] for c in e.checkpoints(2)])
        steps = [(c["step"], c["kind"]) for c in e.checkpoints(2)]
        self.assertEqual(steps[-1], (30, "step"), steps)
        e.check_checkpoints_whole()
        ann = e.json("run", "show", "2", "--json")["annotations"]
        self.assertTrue(any(x["kind"] == "recovered" and x["step"] == 30 for x in ann), ann)
        again = e.ok("gc")  # recorded once: nothing newer is left to take
        self.assertEqual([(c["step"], c["kind"]) for c in e.checkpoints(2)], steps)
        self.assertNotIn("not recorded", again.stderr)

        rb = e.train("--resume", "2", "--save", b, "--quiet")
        self.assertEqual(rb["steps"], 48)
        self.assertSameWeights(a, b)
        self.assertIn(("resumed", 30, "resumed from run 2 step 30"),
                      [(x["kind"], x["step"], x["text"])
                       for x in e.json("run", "show", "3", "--json")["annotations"]])

    def train_then_signal(self, args, steps, signum):
        """Trains e.spec() with args, sends signum once `steps` steps are recorded;
        (stdout, stderr, the process)."""
        e = self.e
        p = e.popen("train", e.spec(), *args, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            q = e.run("runs", "--json")
            if q.returncode == 0 and q.stdout.strip().startswith("[") and \
                    any(r["steps"] >= steps for r in json.loads(q.stdout)):
                break
            time.sleep(0.02)
        self.assertIsNone(p.poll(), "the run ended before it could be interrupted")
        p.send_signal(signum)
        out, err = p.communicate(timeout=120)
        return out, err, p

    def test_hangup_stops_like_ctrl_c(self):
        """The terminal closing (SIGHUP) stops the run with a checkpoint, as Ctrl-C does
        (it killed the process: the run read killed, with no checkpoint)."""
        e = self.e
        out, err, p = self.train_then_signal(["--epochs", "3", "--threads", "1", "--quiet"], 10,
                                             signal.SIGHUP)
        check_no_crash(p.returncode, err)
        self.assertEqual(p.returncode, 128 + signal.SIGHUP, err)
        self.assertEqual(e.status(1), "stopped")
        res = json.loads(out.strip().splitlines()[-1])
        self.assertEqual([c["step"] for c in e.checkpoints(1) if c["kind"] == "final"],
                         [res["steps"]])

    def test_ctrl_c_stops_with_a_checkpoint_and_resumes(self):
        e = self.e
        u = self.path("u.safetensors")
        x = self.path("x.safetensors")
        args = ["--epochs", "3", "--seed", "2", "--threads", "2", "--quiet"]
        if SANITIZED:
            args += ["--limit", "2000"]
        ru = e.train(e.spec(), *args, "--no-record", "--save", u)
        out, err, p = self.train_then_signal(args, 20 if SANITIZED else 60, signal.SIGINT)
        check_no_crash(p.returncode, err)
        self.assertEqual(p.returncode, 128 + signal.SIGINT, err)
        res = json.loads(out.strip().splitlines()[-1])
        self.assertTrue(res["stopped"])
        self.assertLess(res["steps"], ru["steps"])
        self.assertIn("--resume 1", err)
        self.assertIn("stopping after this step", err)  # said at once, on the signal
        # mid-epoch: the stop ends after its step, with no evaluation of the test set
        # first (it ran one, seconds long, saying nothing)
        self.assertLess(res["steps"], 469)
        self.assertIsNone(res["test_loss"])
        p = e.run("metrics", "1", "test_loss")
        self.assertIn("has no metric 'test_loss'", p.stderr)
        self.assertEqual(e.status(1), "stopped")
        final = [c for c in e.checkpoints(1) if c["kind"] == "final"]
        self.assertEqual([c["step"] for c in final], [res["steps"]])
        e.check_checkpoints_whole()
        rx = e.train("--resume", "latest", "--save", x, "--quiet")
        self.assertEqual(rx["run_id"], 2)
        self.assertSameWeights(u, x)
        self.assertEqual(e.status(2), "completed")


class Concurrency(Base):
    def test_readers_never_see_a_locked_database(self):
        e = self.e
        e.ok("gc")  # creates the registry
        args = [e.spec(), "--epochs", "3", "--threads", "2", "--checkpoint-every", "20",
                "--quiet"]
        if not HAVE_DATA:
            args += ["--dataset", "synthetic", "--epochs", "12"]
        if SANITIZED:
            args += ["--limit", "4000", "--epochs", "2"]
        p = e.popen("train", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        reads = metric_reads = 0
        t0 = time.time()
        try:
            while p.poll() is None and time.time() - t0 < 120:
                q = e.run("runs", "--json")
                self.assertEqual(q.returncode, 0, q.stderr)
                self.assertNotIn("locked", q.stderr)
                runs = json.loads(q.stdout)
                reads += 1
                if runs:
                    q = e.run("metrics", str(runs[0]["id"]), "loss", "--json")
                    self.assertEqual(q.returncode, 0, q.stderr)
                    self.assertNotIn("locked", q.stderr)
                    json.loads(q.stdout)
                    metric_reads += 1
        finally:
            out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        self.assertNotIn("locked", err)
        self.assertGreater(metric_reads, 5, "too few reads overlapped the training")
        res = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(len(e.json("metrics", "1", "loss", "--json")), res["steps"])
        print("concurrency: %d runs reads, %d metrics reads during %.1fs of training" %
              (reads, metric_reads, time.time() - t0), file=sys.stderr)


class Models(Base):
    def test_register_promote_rollback_history_gc(self):
        e = self.e
        # a quick run on the synthetic set: three evaluations, checkpoints at each
        res = e.train(e.spec(), "--dataset", "synthetic", "--epochs", "3", "--threads", "2",
                      "--seed", "4", "--quiet")
        ckpts = e.checkpoints(1)
        evals = [c for c in ckpts if c["kind"] in ("eval", "final")]
        self.assertTrue(evals, ckpts)
        last_step = max(c["step"] for c in ckpts)
        self.assertEqual(last_step, res["steps"])

        self.assertEqual(e.json("model", "register", "1", "--name", "mlp", "--json")["version"], 1)
        self.assertEqual(e.json("model", "register", "1", "--name", "mlp", "--checkpoint", "last",
                                "--json")["version"], 2)
        e.ok("model", "register", "1", "--name", "mlp", "--checkpoint", str(ckpts[0]["step"]))
        vs = e.json("model", "versions", "mlp", "--json")
        self.assertEqual([v["version"] for v in vs], [1, 2, 3])
        self.assertTrue(all(v["run"] == 1 and os.path.exists(v["weights"]) for v in vs))
        # each version's metrics are the run's at its checkpoint's step (they were the
        # run's last, so an early checkpoint showed the final epoch's accuracy)
        acc = {p["step"]: p["value"] for p in e.json("metrics", "1", "test_accuracy", "--json")}
        self.assertEqual(len(acc), 3)
        first = ckpts[0]["step"]
        self.assertLess(first, last_step)
        self.assertEqual([v["step"] for v in vs][1:], [last_step, first])
        self.assertAlmostEqual(vs[2]["test_accuracy"], acc[first], places=9)
        self.assertAlmostEqual(vs[1]["test_accuracy"], acc[last_step], places=9)
        # the last step's final checkpoint file gone: its eval twin (same weights) is taken
        final = [c for c in ckpts if c["step"] == last_step and c["kind"] == "final"]
        twin = [c for c in ckpts if c["step"] == last_step and c["kind"] == "eval"]
        self.assertTrue(final and twin, ckpts)
        os.rename(final[0]["path"], final[0]["path"] + ".away")
        e.ok("model", "register", "1", "--name", "twin", "--checkpoint", "last")
        tv = e.json("model", "versions", "twin", "--json")
        self.assertTrue(os.path.samefile(tv[0]["weights"], twin[0]["path"]), tv)
        os.rename(final[0]["path"] + ".away", final[0]["path"])
        p = e.run("model", "register", "1", "--name", "mlp", "--checkpoint", "99999")
        self.assertEqual(p.returncode, 1)
        self.assertIn("99999", p.stderr)

        e.ok("model", "promote", "mlp", "1", "--alias", "production")
        e.ok("model", "promote", "mlp", "2", "--alias", "production")
        e.ok("model", "promote", "mlp", "3", "--alias", "staging")
        # the version the alias already points at: nothing changes, and it says so
        again = e.ok("model", "promote", "mlp", "3", "--alias", "staging")
        self.assertIn("already points at v3: nothing changed", again.stdout)
        self.assertFalse(e.json("model", "promote", "mlp", "3", "--alias", "staging",
                                "--json")["changed"])
        models = [m for m in e.json("models", "--json") if m["name"] == "mlp"]
        self.assertEqual(len(models), 1)
        self.assertIn("production=2", models[0]["aliases"])
        back = e.json("model", "rollback", "mlp", "--alias", "production", "--json")
        self.assertEqual(back["version"], 1)
        self.assertIn("production=1", [m for m in e.json("models", "--json")
                                       if m["name"] == "mlp"][0]["aliases"])
        hist = e.json("model", "history", "mlp", "--json")
        moves = [(h["alias"], h["action"], h["from_version"], h["to_version"]) for h in hist]
        self.assertEqual(moves, [("production", "promote", None, 1),
                                 ("production", "promote", 1, 2),
                                 ("staging", "promote", None, 3),
                                 ("production", "rollback", 2, 1)])
        self.assertIn("rollback", e.ok("model", "history", "mlp").stdout)
        show = e.json("run", "show", "1", "--json")
        self.assertEqual(sorted((v["model"], v["version"]) for v in show["versions"]),
                         [("mlp", 1), ("mlp", 2), ("mlp", 3), ("twin", 1)])
        p = e.run("run", "delete", "1")  # versions came from it
        self.assertEqual(p.returncode, 1)

        # gc: an orphan file (old enough) goes, referenced files stay
        orphan = os.path.join(e.home, "artifacts", "runs", "1", "checkpoints", "orphan.bin")
        with open(orphan, "wb") as f:
            f.write(b"x" * 1000)
        old = time.time() - 3600
        os.utime(orphan, (old, old))
        dry = e.json("gc", "--dry-run", "--json")
        self.assertEqual(dry["files_removed"], 1)
        self.assertTrue(os.path.exists(orphan))
        done = e.json("gc", "--json")
        self.assertEqual((done["files_removed"], done["bytes_removed"]), (1, 1000))
        self.assertFalse(os.path.exists(orphan))
        self.assertTrue(all(os.path.exists(v["weights"]) for v in vs))
        e.check_checkpoints_whole()
        self.assertEqual(e.integrity(), "ok")


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    SANITIZED = sanitized(EMBER)
    unittest.main(argv=[sys.argv[0], "-v"])
