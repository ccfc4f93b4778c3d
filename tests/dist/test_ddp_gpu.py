"""Data-parallel training on GPUs with NCCL (suite gpu): needs 2 CUDA devices.

- The NCCL communicator itself (test-nccl-comm under `mpirun -np 2`;
  with one GPU, `-np 1`: all but the peer that never comes):
  device all-reduce and broadcast, host buffers through MPI, ordering
  after the CUDA backend's stream, the bucketer over NCCL, a peer that
  never comes (timeout, ncclCommAbort).
- `mpirun -np 2 ember train --ddp --device cuda`: each rank on the GPU of
  its local rank, the gradients all-reduced by NCCL in place; 2 ranks of
  batch B train the weights of one process of batch 2B on one GPU
  (fmnist-cnn, SGD with momentum, 16 steps; within 1e-4: cuBLAS and cuDNN
  may sum a batch of B and of 2B in other orders);
  EMBER_DDP_COMM=mpi reduces them over MPI through host copies, with the
  same result.
- One rank frozen (SIGSTOP): the other gives up after EMBER_DDP_TIMEOUT
  and the job ends, non-zero.

Exits 77 (skip) without a CUDA device (nvidia-smi -L); with one, only the
single-rank communicator check runs (the rest is skipped, and says so).

usage: test_ddp_gpu.py EMBER SOURCE_ROOT MPIRUN TEST_NCCL_COMM   (run by /usr/bin/python3)
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
from test_ddp import max_diff, weights  # noqa: E402

EMBER = SOURCE = MPIRUN = NCCL_COMM = None
FMNIST = "/usr/share/datasets/fashion-mnist"


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for l in out.stdout.splitlines() if l.startswith("GPU "))


def mpi_env(home):
    env = dict(os.environ)
    env.update(EMBER_HOME=home, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("XDG_DATA_HOME", None)
    return env


GPUS = gpu_count()
TWO = unittest.skipUnless(GPUS >= 2, "%d CUDA device(s): this needs 2" % GPUS)


class NcclDDP(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-ddp-gpu-")
        self.env = mpi_env(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def mpirun(self, cmd, env=None, timeout=300, ranks=2):
        full = [MPIRUN, "-np", str(ranks)] + cmd
        p = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                           env=dict(self.env, **(env or {})))
        return p

    def test_nccl_comm(self):
        ranks = min(GPUS, 2)
        p = self.mpirun([NCCL_COMM], timeout=180, ranks=ranks)
        print(p.stdout)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr)[-4000:])
        self.assertEqual(p.stdout.count("all ok"), ranks, p.stdout)

    def train(self, *args, ranks=0, env=None):
        cmd = [EMBER, "train"] + [str(a) for a in args]
        if ranks:
            p = self.mpirun(cmd + ["--ddp"], env=env)
        else:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                               env=dict(self.env, **(env or {})))
        self.assertEqual(p.returncode, 0, "%s failed (%d):\n%s" % (
            " ".join(cmd), p.returncode, (p.stdout + p.stderr)[-4000:]))
        return json.loads(p.stdout.splitlines()[-1])

    @TWO
    @unittest.skipUnless(os.path.exists(FMNIST), "Fashion-MNIST is not installed")
    def test_two_gpus_match_one(self):
        spec = os.path.join(SOURCE, "data", "models", "fmnist-cnn.json")
        # SGD: Adam's m / sqrt(v) would magnify the last bits of tiny gradients
        common = [spec, "--no-record", "--epochs", "1", "--limit", "2048", "--seed", "5",
                  "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
                  "--threads", "1", "--quiet", "--device", "cuda"]
        s1 = self.train(*common, "--batch", "128", "--save", self.path("one.safetensors"))
        w1 = weights(self.path("one.safetensors"))
        for comm in ("nccl", "mpi"):
            name = "two-%s.safetensors" % comm
            s2 = self.train(*common, "--batch", "64", "--save", self.path(name), ranks=2,
                            env={"EMBER_DDP_COMM": comm})
            ddp = s2["ddp"]
            print("%s: %s" % (comm, json.dumps(ddp)))
            self.assertEqual(s2["steps"], s1["steps"])
            self.assertEqual((ddp["comm"], ddp["bucket_device"], ddp["staged"]),
                             (comm, "cuda:0", comm == "mpi"), ddp)
            d = max_diff(w1, weights(self.path(name)))
            print("EMBER_DDP_COMM=%s: max |w_1gpu - w_2gpus| = %.3g" % (comm, d))
            self.assertLess(d, 1e-4)

    @TWO
    def test_frozen_rank_times_out(self):
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        cmd = [MPIRUN, "-np", "2", EMBER, "train", spec, "--dataset", "synthetic", "--epochs",
               "1000", "--no-record", "--threads", "1", "--quiet", "--device", "cuda", "--ddp"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(self.env, EMBER_DDP_TIMEOUT="4"), start_new_session=True)
        try:
            time.sleep(20)  # CUDA and NCCL set up, training under way
            if p.poll() is not None:
                self.fail("the run ended early:\n%s" % p.communicate()[1][-3000:])
            frozen = rank_procs.rank_pid(EMBER, self.tmp, 1)
            os.kill(frozen, signal.SIGSTOP)
            t0 = time.time()
            try:
                out, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.fail("mpirun still ran 60 s after a rank froze")
            print("rank 1 frozen: mpirun ended in %.1f s with %d" % (time.time() - t0,
                                                                      p.returncode))
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("did not complete within 4 s", err)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            rank_procs.kill_ranks(EMBER, self.tmp)


if __name__ == "__main__":
    EMBER, SOURCE, MPIRUN = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    NCCL_COMM = os.path.abspath(sys.argv[4])
    if GPUS < 1:
        print("skip: no CUDA device (nvidia-smi -L)")
        sys.exit(77)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "common"))
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[5:])
