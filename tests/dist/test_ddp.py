"""Data-parallel training over Open MPI: `mpirun -np 2 ember train --ddp`.

- Two ranks with batch B train the same weights (within 1e-5) as one
  process with batch 2B and the same seed: fmnist-mlp, SGD with momentum,
  2 epochs of 650 samples (a smaller last batch, and a second epoch's
  permutation); and with gradient accumulation and clipping.
- A recorded 2-rank run: rank 0 alone records (one run, "ddp_world": 2 in
  its config, checkpoints) and prints the JSON summary; a run stopped
  after 6 steps and resumed on 2 ranks from rank 0's checkpoint ends
  with the weights of an uninterrupted 2-rank run.
- Failure: one rank SIGKILLed mid-training makes mpirun end the job,
  non-zero, within 30 s, and the run is not left "running"; one rank
  frozen (SIGSTOP: mpirun sees nothing) makes the other give up after
  EMBER_DDP_TIMEOUT, record the run as failed with a message saying so,
  and end the job; rank 0 frozen for longer than the timeout makes rank
  1 time out first, and rank 0, told so, records the run failed with
  rank 1's message. SIGTERM to rank 1 alone is an orderly stop: rank 0
  records "stopped", prints the JSON line and writes --save, and the job
  exits 143. Rank 0 writing a checkpoint is waited for: frozen in the
  write past the timeout, with the whole job sent SIGTERM meanwhile, the
  run still stops cleanly ("stopped", no temporary file left).
- A 2-rank run checkpoints every N steps (rank 0 writes) and resumes from
  them; resuming a mid-epoch checkpoint on another number of ranks says
  that the number of ranks changed.
- The ranks must agree on what drives their collectives: a rank with
  another EMBER_DDP_BUCKET_MB makes the job fail at the start with one
  message naming the ranks (rank 1 crashed inside MPI before).
- Bad settings are usage errors before anything is recorded:
  EMBER_DDP_TIMEOUT=abc, EMBER_DDP_COMM=bogus.

- A plugin metric (macro-F1) of a 2-rank run is computed over the whole
  test set, gathered from the ranks' shards: the single process's value.
- Gradients on a device (the reference device: device buckets filled and
  read back by the device's copies and kernels): 2 ranks with batch B
  train the weights of one process with batch 2B on that device, with
  MPI reading the buckets in place and through host copies
  (EMBER_DDP_STAGING=1: the path MPI takes with CUDA gradients).

usage: test_ddp.py EMBER SOURCE_ROOT MPIRUN PLUGIN_DIR   (run by /usr/bin/python3: torch)
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rank_procs  # noqa: E402

EMBER = SOURCE = MPIRUN = PLUGINS = None
FMNIST = "/usr/share/datasets/fashion-mnist"
KILL_BOUND_S = 30


def mpi_env(home):
    env = dict(os.environ)
    env.update(EMBER_HOME=home, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("XDG_DATA_HOME", None)
    return env


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def weights(path):
    import safetensors_io
    return {k: v.double() for k, v in safetensors_io.load(path).items()}


def max_diff(a, b):
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


class DDP(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-ddp-")
        self.env = mpi_env(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spec(self):
        return os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")

    def ember(self, *args, ranks=0, timeout=240, check=True, env=None):
        cmd = [EMBER, "train"] + [str(a) for a in args]
        if ranks:
            cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks)] + cmd + ["--ddp"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(self.env, **(env or {})))
        if check:
            self.assertEqual(p.returncode, 0, "%s failed (%d):\n%s" % (
                " ".join(cmd), p.returncode, (p.stdout + p.stderr)[-4000:]))
        return p

    def path(self, name):
        return os.path.join(self.tmp, name)

    def sql(self, query, *params):
        import sqlite3
        con = sqlite3.connect(os.path.join(self.tmp, "registry.db"), timeout=30)
        try:
            return con.execute(query, params).fetchall()
        finally:
            con.close()

    # ---- 2 ranks = one process with the combined batch ----------------------
    @unittest.skipUnless(os.path.exists(FMNIST), "Fashion-MNIST is not installed")
    def test_two_ranks_match_one_process(self):
        common = [self.spec(), "--no-record", "--epochs", "2", "--limit", "650", "--seed", "5",
                  "--threads", "1", "--quiet", "--plugin-dir", PLUGINS, "--metric", "macro_f1"]
        one = self.ember(*common, "--batch", "64", "--save", self.path("one.safetensors"))
        two = self.ember(*common, "--batch", "32", "--save", self.path("two.safetensors"),
                         ranks=2)
        s1, s2 = json.loads(one.stdout.splitlines()[-1]), json.loads(two.stdout.splitlines()[-1])
        self.assertEqual(s1["steps"], 22)
        self.assertEqual(s2["steps"], 22)  # 2 x (10 of 64 + 1 of 10), per rank 10 of 32 + 1 of 5
        self.assertEqual(s2["ddp"]["world"], 2)
        self.assertEqual(s2["ddp"]["bytes_per_step"], 4 * s1["params"])
        # rank 0 alone printed the summary
        self.assertEqual(sum(1 for l in two.stdout.splitlines() if l.startswith("{")), 1)
        d = max_diff(weights(self.path("one.safetensors")), weights(self.path("two.safetensors")))
        print("max |w_1proc - w_2ranks| = %.3g" % d)
        self.assertLess(d, 1e-5)
        # the metrics are global: the same test set, the same weights
        self.assertAlmostEqual(s1["test_accuracy"], s2["test_accuracy"], places=3)
        self.assertAlmostEqual(s1["test_loss"], s2["test_loss"], places=4)  # summed in doubles
        self.assertAlmostEqual(s1["train_loss"], s2["train_loss"], places=4)
        # a plugin's metric too: computed on the gathered outputs of both shards
        print("macro_f1: 1 process %.6f, 2 ranks %.6f" % (s1["metrics"]["macro_f1"],
                                                          s2["metrics"]["macro_f1"]))
        self.assertGreater(s1["metrics"]["macro_f1"], 0.3)
        self.assertAlmostEqual(s1["metrics"]["macro_f1"], s2["metrics"]["macro_f1"], places=4)

    @unittest.skipUnless(os.path.exists(FMNIST), "Fashion-MNIST is not installed")
    def test_accumulation_and_clipping_match(self):
        """Gradient accumulation (the bucketer reduces only the step's last
        micro-batch) and clipping (after the average) match too."""
        common = [self.spec(), "--no-record", "--epochs", "1", "--limit", "650", "--seed", "3",
                  "--threads", "1", "--quiet", "--accumulate", "2", "--clip-grad-norm", "0.5"]
        self.ember(*common, "--batch", "64", "--save", self.path("one.safetensors"))
        self.ember(*common, "--batch", "32", "--save", self.path("two.safetensors"), ranks=2)
        d = max_diff(weights(self.path("one.safetensors")), weights(self.path("two.safetensors")))
        print("accumulate 2, clip 0.5: max |w_1proc - w_2ranks| = %.3g" % d)
        self.assertLess(d, 1e-5)

    # ---- gradients on a device ------------------------------------------------------
    @unittest.skipUnless(os.path.exists(FMNIST), "Fashion-MNIST is not installed")
    def test_ref_device_matches_one_process(self):
        common = [self.spec(), "--no-record", "--epochs", "1", "--limit", "320", "--seed", "5",
                  "--threads", "1", "--quiet", "--device", "ref"]
        one = self.ember(*common, "--batch", "64", "--save", self.path("one.safetensors"))
        s1 = json.loads(one.stdout.splitlines()[-1])
        self.assertEqual(s1["steps"], 5)
        w1 = weights(self.path("one.safetensors"))
        for staging in ("0", "1"):
            name = "two-%s.safetensors" % staging
            two = self.ember(*common, "--batch", "32", "--save", self.path(name), ranks=2,
                             env={"EMBER_DDP_STAGING": staging, "EMBER_DDP_BUCKET_MB": "0.1"})
            s2 = json.loads(two.stdout.splitlines()[-1])
            self.assertEqual(s2["steps"], 5)
            ddp = s2["ddp"]
            self.assertEqual((ddp["comm"], ddp["bucket_device"], ddp["staged"]),
                             ("mpi", "ref:0", staging == "1"), ddp)
            self.assertGreater(ddp["buckets"], 1)  # 0.1 MB buckets: several in flight
            d = max_diff(w1, weights(self.path(name)))
            print("ref device, staging %s: max |w_1proc - w_2ranks| = %.3g" % (staging, d))
            self.assertLess(d, 1e-5)

    # ---- recording and resuming ------------------------------------------------
    def test_record_and_resume(self):
        common = [self.spec(), "--dataset", "synthetic", "--epochs", "2", "--limit", "512",
                  "--batch", "16", "--seed", "9", "--threads", "1", "--quiet"]
        full = self.ember(*common, "--save", self.path("full.safetensors"), ranks=2)
        summary = json.loads(full.stdout.splitlines()[-1])
        runs = self.sql("SELECT id, status, config_json FROM runs")
        self.assertEqual(len(runs), 1, runs)  # rank 0 alone records
        self.assertEqual(runs[0][1], "completed")
        self.assertEqual(json.loads(runs[0][2])["ddp_world"], 2)
        self.assertEqual(summary["run_id"], runs[0][0])
        self.assertGreater(self.sql("SELECT count(*) FROM checkpoints WHERE run = ?",
                                    runs[0][0])[0][0], 0)

        # --checkpoint-every: rank 0 writes them (rank 1 exited 2 on it before)
        part = self.ember(*common, "--stop-after-steps", "6", "--checkpoint-every", "4", ranks=2)
        self.assertTrue(json.loads(part.stdout.splitlines()[-1])["stopped"])
        stopped = self.sql("SELECT id, status FROM runs ORDER BY id")[-1]
        self.assertEqual(stopped[1], "stopped")
        self.assertEqual(self.sql("SELECT step, kind FROM checkpoints WHERE run = ? AND "
                                  "kind = 'step'", stopped[0]), [(4, "step")])
        self.ember("--resume", str(stopped[0]), "--save", self.path("resumed.safetensors"),
                   "--quiet", ranks=2)
        last = self.sql("SELECT status, parent_run FROM runs ORDER BY id")[-1]
        self.assertEqual(last, ("completed", stopped[0]))
        d = max_diff(weights(self.path("full.safetensors")),
                     weights(self.path("resumed.safetensors")))
        print("max |w_full - w_resumed| = %.3g" % d)
        self.assertLess(d, 1e-6)

    def test_resume_on_other_world_names_it(self):
        """A mid-epoch checkpoint of one process resumed on 2 ranks: the
        error says the number of ranks changed."""
        self.ember(self.spec(), "--dataset", "synthetic", "--epochs", "1", "--limit", "512",
                   "--batch", "16", "--threads", "1", "--quiet", "--stop-after-steps", "20")
        p = self.ember("--resume", "latest", "--quiet", ranks=2, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("trained on 1 rank and this part runs on 2", p.stderr)
        self.assertEqual(p.stderr.count("an epoch here has only"), 1, p.stderr)  # said once

    # ---- what the ranks must agree on -------------------------------------------------
    def test_ranks_must_agree(self):
        args = [EMBER, "train", self.spec(), "--dataset", "synthetic", "--epochs", "1",
                "--limit", "256", "--threads", "1", "--quiet", "--no-record", "--ddp"]
        # rank 1 alone with other buckets (MPMD: each rank its own environment)
        cmd = [MPIRUN, "--oversubscribe", "-np", "1"] + args + [
            ":", "-np", "1", "env", "EMBER_DDP_BUCKET_MB=0.05"] + args
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=self.env)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("rank 0 reduces its gradients in 1 buckets, rank 1 has", p.stderr)
        self.assertIn("EMBER_DDP_BUCKET_MB", p.stderr)
        self.assertEqual(p.stderr.count("reduces its gradients"), 1, p.stderr)  # said once

    def test_one_rank_says_so(self):
        # --ddp started without mpirun trained as one process without a word
        p = self.ember(self.spec(), "--ddp", "--no-record", "--epochs", "0", "--threads", "1")
        self.assertIn("--ddp with 1 rank: this trains as one process", p.stderr)

    def test_bad_settings_are_usage_errors(self):
        for var, value in (("EMBER_DDP_TIMEOUT", "abc"), ("EMBER_DDP_COMM", "bogus")):
            p = self.ember(self.spec(), "--dataset", "synthetic", "--epochs", "1", "--quiet",
                           ranks=2, check=False, env={var: value})
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("%s is '%s'" % (var, value), p.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "registry.db")) and
                             self.sql("SELECT count(*) FROM runs")[0][0], "a run was recorded")

    # ---- failure ------------------------------------------------------------------
    def start_long_run(self, extra_env=None, extra=(), spec=None):
        env = dict(self.env, **(extra_env or {}))
        cmd = [MPIRUN, "--oversubscribe", "-np", "2", EMBER, "train", spec or self.spec(), "--dataset",
               "synthetic", "--epochs", "1000", "--threads", "1", "--quiet", "--ddp"] + list(extra)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)
        self.addCleanup(self.kill_ranks)
        # wait until the run trains: recorded, with metrics
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.3)
            try:
                if self.sql("SELECT count(*) FROM metric_chunks")[0][0] > 0:
                    break
            except Exception:
                pass
            if p.poll() is not None:
                self.fail("the run ended early:\n%s" % p.communicate()[1][-3000:])
        else:
            self.fail("the run recorded no metric within 60 s")
        return p

    def kill_ranks(self):
        """SIGKILLs what is left of this test's job (never other processes)."""
        rank_procs.kill_ranks(EMBER, self.tmp)

    def rank_pids(self):
        """{rank: pid} of this test's ember ranks (OMPI_COMM_WORLD_RANK, EMBER_HOME)."""
        return rank_procs.rank_pids(EMBER, self.tmp)

    def end_within(self, p, bound):
        t0 = time.time()
        try:
            out, err = p.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            self.kill_ranks()
            p.kill()
            p.communicate()
            self.fail("mpirun still ran %d s after the failure" % bound)
        self.out = out
        return time.time() - t0, p.returncode, err

    def final_status(self):
        # opening the registry for writing marks runs of vanished processes "killed"
        # (gc: its files are all new, so it removes nothing)
        subprocess.run([EMBER, "gc"], capture_output=True, env=self.env, timeout=60)
        return self.sql("SELECT status, message FROM runs")

    def test_killed_rank_ends_the_job(self):
        p = self.start_long_run()
        os.kill(rank_procs.rank_pid(EMBER, self.tmp, 1), signal.SIGKILL)
        t0 = time.time()
        took, rc, err = self.end_within(p, KILL_BOUND_S)
        rank0 = self.sql("SELECT pid FROM runs")[0][0]  # rank 0 records
        while (self.rank_pids() or alive(rank0)) and time.time() - t0 < KILL_BOUND_S:
            time.sleep(0.2)
        gone = time.time() - t0
        print("rank 1 SIGKILLed: mpirun ended in %.1f s with %d, every rank gone in %.1f s" % (
            took, rc, gone))
        self.assertNotEqual(rc, 0)
        self.assertEqual(self.rank_pids(), {}, "a rank outlived the bound")
        self.assertFalse(alive(rank0), "rank 0 outlived the bound")
        runs = self.final_status()
        self.assertEqual(len(runs), 1)
        print("the run: %s (%s)" % runs[0])
        self.assertIn(runs[0][0], ("failed", "killed"), runs)

    def test_frozen_rank_times_out(self):
        p = self.start_long_run({"EMBER_DDP_TIMEOUT": "4"})
        frozen = rank_procs.rank_pid(EMBER, self.tmp, 1)
        os.kill(frozen, signal.SIGSTOP)
        try:
            took, rc, err = self.end_within(p, KILL_BOUND_S)
        finally:
            rank_procs.send(frozen, signal.SIGKILL)
        print("rank 1 frozen: mpirun ended in %.1f s with %d" % (took, rc))
        self.assertNotEqual(rc, 0)
        self.assertIn("did not complete within 4 s", err)
        runs = self.final_status()
        self.assertEqual(runs[0][0], "failed", runs)
        self.assertIn("did not complete within 4 s", runs[0][1])

    def test_rank1_times_out_first(self):
        """Rank 0 frozen past the timeout: rank 1 times out, and rank 0
        (thawed) records the run failed with rank 1's message (rank 1 used to
        abort the job at once, and the run was left 'killed')."""
        # no evaluation, hence no checkpoint, until the end: rank 0 frozen while
        # it says it writes one would be waited for, by design
        with open(self.spec()) as f:
            spec = json.load(f)
        spec["training"]["eval_every"] = 1000
        path = self.path("no-eval.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = self.start_long_run({"EMBER_DDP_TIMEOUT": "2"}, spec=path)
        rank0 = rank_procs.rank_pid(EMBER, self.tmp, 0)
        os.kill(rank0, signal.SIGSTOP)
        time.sleep(3.5)
        rank_procs.send(rank0, signal.SIGCONT)
        took, rc, err = self.end_within(p, KILL_BOUND_S)
        self.assertNotEqual(rc, 0)
        runs = self.final_status()
        print("rank 0 frozen: %s (%s)" % runs[0])
        self.assertEqual(runs[0][0], "failed", runs)
        self.assertIn("rank 1: ", runs[0][1])
        self.assertIn("did not complete within 2 s", runs[0][1])

    def test_sigterm_to_rank1_stops(self):
        save = self.path("stopped.safetensors")
        p = self.start_long_run(extra=("--save", save))
        os.kill(rank_procs.rank_pid(EMBER, self.tmp, 1), signal.SIGTERM)
        took, rc, err = self.end_within(p, KILL_BOUND_S)
        out = self.out
        self.assertEqual(rc, 128 + signal.SIGTERM, err[-3000:])
        self.assertNotIn("MPI_ABORT", err)  # an orderly stop: no rank aborts the job
        self.assertEqual(self.final_status()[0][0], "stopped")
        self.assertTrue(os.path.exists(save), "no --save")
        self.assertTrue(json.loads(out.splitlines()[-1])["stopped"])

    def test_checkpoint_write_is_waited_for(self):
        """Rank 0 frozen inside a checkpoint write for longer than the
        timeout, the whole job sent SIGTERM meanwhile: rank 1 waits for the
        write (it neither times out nor takes the stop for a dead peer), and
        the run stops cleanly."""
        spec = self.path("wide.json")
        with open(spec, "w") as f:  # a checkpoint of 46 MB: its write is long enough to catch
            json.dump({"name": "wide", "input": {"shape": [1, 28, 28]}, "nodes": [
                {"name": "flatten", "type": "Flatten"},
                {"name": "fc1", "type": "Linear", "out_features": 2048},
                {"name": "relu1", "type": "ReLU"},
                {"name": "fc2", "type": "Linear", "out_features": 2048},
                {"name": "relu2", "type": "ReLU"},
                {"name": "fc3", "type": "Linear", "out_features": 10}],
                "loss": {"type": "cross_entropy"},
                "training": {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9}}, f)
        cmd = [MPIRUN, "--oversubscribe", "-np", "2", EMBER, "train", spec, "--dataset",
               "synthetic", "--epochs", "1", "--limit", "1024", "--batch", "16",
               "--checkpoint-every", "1", "--threads", "1", "--quiet", "--ddp"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(self.env, EMBER_DDP_TIMEOUT="1.5"), start_new_session=True)
        self.addCleanup(self.kill_ranks)
        pattern = os.path.join(self.tmp, "artifacts", "runs", "*", "checkpoints", "*.tmp-*")
        deadline, caught = time.time() + 90, False
        while not caught and time.time() < deadline and p.poll() is None:
            if not glob.glob(pattern):
                time.sleep(0.002)
                continue
            rank0 = rank_procs.rank_pids(EMBER, self.tmp).get(0)
            if rank0 is None:
                continue
            os.kill(rank0, signal.SIGSTOP)
            caught = bool(glob.glob(pattern))  # frozen inside the write
            if not caught:
                os.kill(rank0, signal.SIGCONT)
        self.assertTrue(caught, "no checkpoint write was caught")
        for pid in rank_procs.rank_pids(EMBER, self.tmp).values():
            os.kill(pid, signal.SIGTERM)  # a whole-job stop; rank 0 sees it when thawed
        time.sleep(3.0)  # past the timeout and the 2 s of the stop shortcut
        os.kill(rank0, signal.SIGCONT)
        took, rc, err = self.end_within(p, KILL_BOUND_S)
        self.assertEqual(rc, 128 + signal.SIGTERM, err[-3000:])
        self.assertEqual(self.final_status()[0][0], "stopped")
        self.assertEqual(glob.glob(pattern), [], "a temporary file was left")


if __name__ == "__main__":
    EMBER, SOURCE, MPIRUN = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    PLUGINS = sys.argv[4]
    sys.path.insert(0, os.path.join(SOURCE, "tests", "common"))
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[5:])
