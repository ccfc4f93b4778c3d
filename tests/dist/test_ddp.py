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
  and end the job.

- A plugin metric (macro-F1) of a 2-rank run is computed over the whole
  test set, gathered from the ranks' shards: the single process's value.
- Gradients on a device (the reference device: device buckets filled and
  read back by the device's copies and kernels): 2 ranks with batch B
  train the weights of one process with batch 2B on that device, with
  MPI reading the buckets in place and through host copies
  (EMBER_DDP_STAGING=1: the path MPI takes with CUDA gradients).

usage: test_ddp.py EMBER SOURCE_ROOT MPIRUN PLUGIN_DIR   (run by /usr/bin/python3: torch)
"""
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

        part = self.ember(*common, "--stop-after-steps", "6", ranks=2)
        self.assertTrue(json.loads(part.stdout.splitlines()[-1])["stopped"])
        stopped = self.sql("SELECT id, status FROM runs ORDER BY id")[-1]
        self.assertEqual(stopped[1], "stopped")
        self.ember("--resume", str(stopped[0]), "--save", self.path("resumed.safetensors"),
                   "--quiet", ranks=2)
        last = self.sql("SELECT status, parent_run FROM runs ORDER BY id")[-1]
        self.assertEqual(last, ("completed", stopped[0]))
        d = max_diff(weights(self.path("full.safetensors")),
                     weights(self.path("resumed.safetensors")))
        print("max |w_full - w_resumed| = %.3g" % d)
        self.assertLess(d, 1e-6)

    # ---- failure ------------------------------------------------------------------
    def start_long_run(self, extra_env=None):
        env = dict(self.env, **(extra_env or {}))
        cmd = [MPIRUN, "--oversubscribe", "-np", "2", EMBER, "train", self.spec(), "--dataset",
               "synthetic", "--epochs", "1000", "--threads", "1", "--quiet", "--ddp"]
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


if __name__ == "__main__":
    EMBER, SOURCE, MPIRUN = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    PLUGINS = sys.argv[4]
    sys.path.insert(0, os.path.join(SOURCE, "tests", "common"))
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[5:])
