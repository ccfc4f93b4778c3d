"""The command line in daily use (issue 32): what a person meets piping,
scripting and reading `ember`'s output.

- `ember train ... | head`: a closed stdout or stderr never stops
  training or recording (SIGPIPE ignored, EPIPE on progress output means
  "stop printing"): the run completes with its test metrics and
  checkpoints.
- A zoo spec by its name (`ember info fmnist-cnn`) from any folder.
- `ember --version`.
- `ember eval NAME@ALIAS`.
- Versions: one spelling, v2, in what `ember model` says, and both 2 and
  v2 taken (the workbench shows v2); another architecture registered
  under a model's name is said, with both parameter counts.

usage: test_daily.py EMBER SOURCE_ROOT (Debian's /usr/bin/python3; no torch)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from cli_util import Ember, check_no_crash, sanitized

EMBER = SOURCE = None
SANITIZED = False


class Daily(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-daily-")
        self.e = Ember(EMBER, SOURCE, self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def train_args(self, *extra):
        limit = "256" if SANITIZED else "2048"
        return ["train", self.e.spec(), "--dataset", "synthetic", "--limit", limit, "--epochs",
                "2", "--batch", "32", "--threads", "1", "--seed", "5"] + list(extra)

    def test_closed_pipes_do_not_stop_training(self):
        """`ember train ... 2>&1 | head -1`: both streams closed after the
        first line; the run still completes, evaluated and checkpointed."""
        r, w = os.pipe()
        p = self.e.popen(*self.train_args(), stdout=w, stderr=w)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            first = f.readline()  # "recording as run 1 ...": then the reader goes away, as head does
        self.assertTrue(first)
        rc = p.wait(timeout=600)
        self.assertNotEqual(rc, -13, "killed by SIGPIPE")
        self.assertEqual(rc, 0)
        rows = self.e.sql("SELECT id, status FROM runs")
        self.assertEqual(len(rows), 1, rows)
        run, status = rows[0]
        self.assertEqual(status, "completed")
        shown = self.e.json("run", "show", run, "--json")
        self.assertIsNotNone(shown["test_accuracy"])  # evaluated: it died at the evaluation
        self.assertTrue(self.e.checkpoints(run))

    def test_closed_stdout(self):
        """stdout closed outright (`>&-`): the run completes and is recorded."""
        p = subprocess.run([EMBER] + self.train_args("--quiet"), env=self.e.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=600, close_fds=True,
                           preexec_fn=lambda: os.close(1))
        check_no_crash(p.returncode, p.stderr)
        self.assertEqual(self.e.sql("SELECT status FROM runs"), [("completed",)])

    def test_zoo_names(self):
        """A spec named by its zoo name, from any folder: the CLI finds the
        zoo as the workbench does (one resolver, em_data_dir)."""
        e = self.e
        p = subprocess.run([EMBER, "info", "fmnist-cnn"], cwd=self.tmp, env=e.env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("model: fmnist-cnn", p.stdout)
        self.assertIn("421,642", p.stdout)
        p = subprocess.run([EMBER, "train", "fmnist-mlp.json", "--dataset", "synthetic",
                            "--limit", "64", "--epochs", "1", "--no-record", "--quiet"],
                           cwd=self.tmp, env=e.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([EMBER, "info", "no-such-model"], cwd=self.tmp, env=e.env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot open spec 'no-such-model'", p.stderr)

    def test_version_flag(self):
        """`ember --version` (it was an unknown command)."""
        for flag in ("--version", "-V", "version"):
            p = self.e.ok(flag)
            self.assertRegex(p.stdout, r"^ember \d+\.\d+")
        self.assertIn("--version", self.e.ok("--help").stdout)

    def test_version_spellings(self):
        e = self.e
        e.ok(*self.train_args("--quiet"))
        out = e.ok("model", "register", "1", "--name", "fmnist").stdout
        self.assertIn("registered fmnist v1 from run 1", out)
        e.ok("model", "register", "1", "--name", "fmnist")
        p = e.ok("model", "promote", "fmnist", "v2", "--alias", "production")
        self.assertIn("production -> v2", p.stdout)
        p = e.ok("model", "promote", "fmnist", "1", "--alias", "production")
        self.assertIn("production -> v1", p.stdout)
        p = e.ok("model", "promote", "fmnist", "V1", "--alias", "production")
        self.assertIn("already points at v1", p.stdout)
        for bad in ("v", "v-1", "0", "+1", "1x"):
            p = e.run("model", "promote", "fmnist", bad, "--alias", "production")
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn("write 3 or v3", p.stderr)
        # NAME@v2 is a version, as NAME@2
        refs = [e.run("export", "fmnist@" + sel, "-o", os.path.join(self.tmp, sel + ".onnx"))
                for sel in ("v2", "2")]
        for p in refs:
            self.assertEqual(p.returncode, 0, p.stderr)
        # an alias spelled as a version is refused
        p = e.run("model", "promote", "fmnist", "1", "--alias", "v7")
        self.assertNotEqual(p.returncode, 0)

    def test_eval_model_reference(self):
        """`ember eval NAME@ALIAS` as predict, export and serve take it (it
        asked for --weights), on the data the version's run trained on."""
        e = self.e
        e.ok(*self.train_args("--quiet"))
        e.ok("model", "register", "1", "--name", "fmnist")
        e.ok("model", "promote", "fmnist", "1", "--alias", "production")
        by_ref = json.loads(e.ok("eval", "fmnist@production").stdout.strip().splitlines()[-1])
        weights = e.json("model", "versions", "fmnist", "--json")[0]["weights"]
        by_file = json.loads(e.ok("eval", e.spec(), "--weights", weights, "--dataset",
                                  "synthetic").stdout.strip().splitlines()[-1])
        self.assertEqual(by_ref["test_loss"], by_file["test_loss"])
        self.assertEqual(by_ref["test_accuracy"], by_file["test_accuracy"])
        p = e.run("eval", "fmnist@staging")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no alias 'staging'", p.stderr)

    def test_other_architecture_said(self):
        e = self.e
        e.ok(*self.train_args("--quiet"))  # run 1: fmnist-mlp, 235,146 parameters
        e.ok("train", e.spec("fmnist-cnn.json"), "--dataset", "synthetic", "--limit", "256",
             "--epochs", "1", "--threads", "1", "--quiet")  # run 2: the CNN, 421,642
        e.ok("model", "register", "1", "--name", "fmnist")
        p = e.ok("model", "register", "2", "--name", "fmnist")
        self.assertIn("421,642 parameters against 235,146", p.stderr)
        self.assertIn("fmnist v1", p.stderr)
        p = e.ok("model", "register", "2", "--name", "fmnist")  # the same as v2: nothing said
        self.assertNotIn("architecture", p.stderr)


if __name__ == "__main__":
    EMBER, SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    SANITIZED = sanitized(EMBER)
    unittest.main(argv=[sys.argv[0], "-v"])
