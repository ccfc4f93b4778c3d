"""Bad input to the registry commands: each must end with a clear
`ember: ...` message and exit 1 (2 for bad usage), never a crash, and
must leave what is on disk as it was. This suite also runs against the
AddressSanitizer build (suite badinput), so its trainings are small.

- a registry.db that is random bytes, an SQLite file of another program,
  a registry written by a newer Ember (file unchanged in each case);
- damaged checkpoints: resume passes over a truncated newest checkpoint
  (and says so) and still ends bit-identical to an uninterrupted run;
  with no valid checkpoint it refuses clearly;
- unknown runs, keys, models and aliases; usage errors.

usage: test_registry_bad.py EMBER SOURCE_ROOT
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unicodedata
import unittest

from cli_util import Ember, same_weights, sha256_file

EMBER = SOURCE = None


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-regbad-")
        self.e = Ember(EMBER, SOURCE, os.path.join(self.tmp, "home"))
        os.makedirs(self.e.home)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def fails(self, args, *needles, code=1):
        p = self.e.run(*args)
        self.assertEqual(p.returncode, code, "%s: %s" % (args, p.stderr))
        for n in needles:
            self.assertIn(n, p.stderr, args)
        self.assertTrue(any(l.startswith("ember: ") for l in p.stderr.splitlines()), p.stderr)
        return p

    def quick_train_args(self):
        # the synthetic set: nothing to load, a small test split (fast under ASan too)
        return [self.e.spec(), "--epochs", "1", "--dataset", "synthetic", "--limit", "256",
                "--batch", "64", "--threads", "2", "--quiet"]


class ForeignRegistry(Base):
    """Files that are not (this) Ember's registry are refused, untouched."""

    def refused_everywhere(self, needle):
        before = sha256_file(self.e.db)
        size = os.path.getsize(self.e.db)
        for args in (["runs"], ["runs", "--json"], ["run", "show", "1"], ["models"],
                     ["metrics", "1", "loss"], ["gc"], ["model", "versions", "m"],
                     ["train"] + self.quick_train_args()):
            p = self.fails(args, needle)
            self.assertIn("registry.db", p.stderr, args)
        self.assertEqual(sha256_file(self.e.db), before)
        self.assertEqual(os.path.getsize(self.e.db), size)

    def test_random_bytes(self):
        with open(self.e.db, "wb") as f:
            f.write(os.urandom(8192))
        self.refused_everywhere("registry.db")

    def test_sqlite_of_another_program(self):
        con = sqlite3.connect(self.e.db)
        con.execute("CREATE TABLE recipes (name TEXT, minutes INTEGER)")
        con.execute("INSERT INTO recipes VALUES ('soup', 40)")
        con.commit()
        con.close()
        self.refused_everywhere("another program")
        con = sqlite3.connect(self.e.db)
        self.assertEqual(con.execute("SELECT * FROM recipes").fetchall(), [("soup", 40)])
        self.assertEqual([r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")], ["recipes"])
        con.close()

    def test_newer_schema(self):
        self.e.ok("gc")  # a fresh registry
        con = sqlite3.connect(self.e.db)
        con.execute("PRAGMA user_version = 999")
        con.close()
        self.refused_everywhere("newer")
        con = sqlite3.connect(self.e.db)
        self.assertEqual(con.execute("PRAGMA user_version").fetchone()[0], 999)
        con.close()


class LostOrReadOnly(Base):
    """A registry.db lost beside its files, a dry run, a read-only folder."""

    def files(self):
        art = os.path.join(self.e.home, "artifacts")
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(art) for f in fs)

    def test_lost_database_refused_and_files_kept(self):
        self.e.ok("train", *self.quick_train_args(), "--checkpoint-every", "2")
        files = self.files()
        self.assertGreater(len(files), 0)
        for extra in ("", "-wal", "-shm"):
            if os.path.exists(self.e.db + extra):
                os.remove(self.e.db + extra)
        for emptied in (False, True):
            if emptied:
                open(self.e.db, "wb").close()
            # readers too: they said "no runs yet", exit 0, as if the history were gone
            for args in (["gc"], ["train"] + self.quick_train_args(), ["runs"], ["models"],
                         ["run", "show", "1"], ["gc", "--dry-run"]):
                self.fails(args, "missing or empty", "holds recorded files")
            self.assertEqual(self.files(), files)
            self.assertEqual(os.path.exists(self.e.db), emptied)  # nothing created

    def test_dry_run_and_read_only_folder(self):
        self.e.ok("train", *self.quick_train_args(), "--checkpoint-every", "1",
                  "--keep-checkpoints", "10")
        # a run whose process is gone, as a kill leaves it, with its writer behind:
        # rows after step 2 never made it, and the files are two days old (the run
        # three: a file older than its run would be another run's)
        con = sqlite3.connect(self.e.db)
        con.execute("UPDATE runs SET started = started - 3 * 86400")
        arts = [r[0] for r in con.execute("SELECT artifact FROM checkpoints WHERE step > 2")]
        con.execute("DELETE FROM checkpoints WHERE step > 2")
        con.executemany("DELETE FROM artifacts WHERE id = ?", [(a,) for a in arts])
        con.execute("UPDATE runs SET status = 'running', pid = 2147483646, pid_start = NULL "
                    "WHERE id = 1")
        con.commit()
        con.close()
        old = time.time() - 2 * 86400
        for f in self.files():
            os.utime(f, (old, old))
        unrecorded = len(self.files()) - self.e.sql("SELECT count(*) FROM artifacts")[0][0]
        self.assertGreater(unrecorded, 1)
        dry = json.loads(self.e.ok("gc", "--dry-run", "--json").stdout)
        self.assertEqual(dry["files_to_record"], 1)  # the newest: the real gc records it
        self.assertEqual(dry["files_removed"], unrecorded - 1)
        self.assertEqual(self.e.sql("SELECT status FROM runs")[0][0], "running")  # no write
        real = json.loads(self.e.ok("gc", "--json").stdout)  # sweeps, records, removes
        self.assertEqual(real["files_removed"], dry["files_removed"])
        self.assertEqual(self.e.sql("SELECT status FROM runs")[0][0], "killed")
        # A folder its reader cannot write (an archive; as 'nobody' when root,
        # since root writes anywhere): every reading command works.
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to read as another user")
        for d, dirs, fs in os.walk(self.tmp):
            os.chmod(d, 0o755)
            for f in fs:
                os.chmod(os.path.join(d, f), 0o644)
        os.chmod(self.e.home, 0o555)
        try:
            for args in (["runs"], ["run", "show", "1"], ["metrics", "1", "loss"], ["models"],
                         ["gc", "--dry-run"]):
                p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                                    "--clear-groups", EMBER] + args, capture_output=True,
                                   text=True, env=self.e.env, timeout=120)
                self.assertEqual(p.returncode, 0, "%s: %s" % (args, p.stderr))
        finally:
            os.chmod(self.e.home, 0o755)


class SharedRegistry(Base):
    def test_reader_who_cannot_write_the_database_leaves_no_files(self):
        """Another user reads a registry whose folder they may write (a shared,
        sticky folder) but whose registry.db they may not: opened the usual way,
        the reader left registry.db-wal and -shm owned by them, and every later
        write of the owner failed ('attempt to write a readonly database') until
        someone deleted them. The reader opens it immutable: no files."""
        setpriv = shutil.which("setpriv")
        if os.geteuid() != 0 or not setpriv:
            self.skipTest("needs root and setpriv to read as another user")
        self.e.ok("train", *self.quick_train_args())
        os.chmod(self.e.home, 0o1777)
        os.chmod(self.e.db, 0o644)
        for p in (self.tmp, os.path.dirname(self.e.exe)):
            os.chmod(p, os.stat(p).st_mode | 0o055)  # the other user reaches them
        env = dict(self.e.env, HOME="/tmp")
        p = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                            self.e.exe, "runs", "--json"], capture_output=True, text=True,
                           env=env, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(json.loads(p.stdout)), 1)
        for extra in ("-wal", "-shm"):
            path = self.e.db + extra
            self.assertFalse(os.path.exists(path) and os.stat(path).st_uid != 0,
                             "the reader left " + path)
        self.e.ok("run", "tag", "1", "checked=yes")


class DamagedCheckpoints(Base):
    # 8 steps an epoch, a checkpoint every 3
    ARGS = ["--epochs", "2", "--threads", "2", "--checkpoint-every", "3", "--seed", "8",
            "--dataset", "synthetic", "--limit", "256", "--batch", "32", "--quiet"]

    def test_truncated_newest_is_passed_over(self):
        e = self.e
        a, b = os.path.join(self.tmp, "a.st"), os.path.join(self.tmp, "b.st")
        ra = e.train(e.spec(), *self.ARGS, "--save", a)  # run 1
        total = ra["steps"]
        stop = total // 2 + 5
        e.train(e.spec(), *self.ARGS, "--stop-after-steps", stop)  # run 2
        rows = e.checkpoints(2)
        newest = rows[-1]
        self.assertEqual((newest["step"], newest["kind"]), (stop, "final"))
        with open(newest["path"], "r+b") as f:
            f.truncate(newest["size"] // 2)
        prev = max(c["step"] for c in rows if c["step"] < stop)
        p = e.ok("train", "--resume", "2", "--save", b)
        self.assertIn("damaged", p.stderr)
        self.assertIn("step %d" % prev, p.stderr)
        same, why = same_weights(a, b)
        self.assertTrue(same, why)
        loss = e.json("metrics", "3", "loss", "--json")
        self.assertEqual(loss[0]["step"], prev + 1)

    def test_deleted_file_is_marked_and_named(self):
        # a checkpoint file deleted behind the registry's back: run show listed it as
        # if there, and gc counted such files without naming one
        e = self.e
        e.train(e.spec(), *self.ARGS)
        gone = e.checkpoints(1)[0]["path"]
        os.remove(gone)
        show = e.ok("run", "show", "1").stdout
        self.assertIn(gone + "  (missing)", show)
        self.assertEqual(show.count("(missing)"), 1)
        dry = e.ok("gc", "--dry-run").stdout
        self.assertIn("1 recorded file is missing from artifacts/ (%s)" % gone, dry)
        self.assertEqual(e.json("gc", "--dry-run", "--json")["first_missing_file"], gone)

    def test_no_valid_checkpoint_is_a_clear_error(self):
        e = self.e
        e.train(e.spec(), *self.ARGS, "--stop-after-steps", "5")
        rows = e.checkpoints(1)
        self.assertTrue(rows)
        for c in rows:
            with open(c["path"], "r+b") as f:
                f.truncate(10)
        self.fails(["train", "--resume", "1"], "cannot be resumed")
        self.fails(["train", "--resume", "latest"], "cannot be resumed")
        os.unlink(rows[0]["path"])
        self.fails(["train", "--resume", "1"], "cannot be resumed")
        self.assertEqual([r[0] for r in e.sql("SELECT id FROM runs")], [1])  # no new run


class Divergence(Base):
    """A learning rate that makes the loss NaN: printed, recorded as run
    events, and the run ends "failed" with the reason."""

    ARGS = ["--epochs", "1", "--threads", "2", "--dataset", "synthetic", "--limit", "256",
            "--batch", "32", "--lr", "50", "--quiet"]

    def test_rollbacks_then_failure_are_recorded(self):
        e = self.e
        # checkpoints at steps 3 and 6, NaN at 5: rollbacks to 3 (one at 4, the
        # step before, would repeat step 5 exactly: the run would stop at once)
        p = self.fails(["train", e.spec(), *self.ARGS, "--checkpoint-every", "3",
                        "--divergence-lr-factor", "0.5"], "divergence at step", "NaN")
        self.assertIn("rolled back", p.stderr)
        # the last divergence's text once, then that the run stopped on it
        last = [l for l in p.stderr.splitlines() if "divergence at step" in l][-1]
        self.assertEqual(p.stderr.count(last.split(": ", 2)[2]), 1, p.stderr)
        self.assertIn("training stopped on that divergence", p.stderr)
        (status, message), = e.sql("SELECT status, message FROM runs WHERE id = 1")
        self.assertEqual(status, "failed")
        self.assertIn("NaN", message)
        events = [(a["kind"], a["text"]) for a in
                  e.json("run", "show", "1", "--json")["annotations"]]
        self.assertGreaterEqual(len(events), 2, events)
        self.assertTrue(all(k == "divergence" for k, _ in events), events)
        self.assertIn("rolled back", events[0][1])
        self.assertEqual(e.integrity(), "ok")
        # resuming it brings its settings back: said before it diverges again,
        # also after a note and a resume were added to it
        p = self.fails(["train", "--resume", "1", "--quiet"], "stopped on a divergence")
        self.assertIn("a new run with a lower --lr", p.stderr)
        self.assertEqual(e.run("run", "note", "1", "looked at it").returncode, 0)
        self.fails(["train", "--resume", "1", "--quiet"], "stopped on a divergence")

    def test_rollback_settings_in_the_spec_and_flags(self):
        # the README's spec keys checkpoint_every and max_rollbacks were refused as
        # unknown, and the limit of 5 rollbacks had no flag
        e = self.e
        with open(e.spec()) as f:
            spec = json.load(f)
        spec["training"].update({"checkpoint_every": 3, "max_rollbacks": 1,
                                 "divergence_lr_factor": 0.5})
        path = os.path.join(self.tmp, "rollbacks.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = self.fails(["train", path, *self.ARGS], "divergence at step")
        events = [a["text"] for a in e.json("run", "show", "1", "--json")["annotations"]
                  if a["kind"] == "divergence"]
        self.assertEqual(sum("rolled back" in t for t in events), 1, events)  # then it stops
        config = e.json("run", "show", "1", "--json")["config"]
        self.assertEqual((config["checkpoint_every"], config["max_rollbacks"]), (3, 1), config)
        self.fails(["train", e.spec(), *self.ARGS, "--checkpoint-every", "3",
                    "--max-rollbacks", "0"], "divergence at step")
        events = [a["text"] for a in e.json("run", "show", "2", "--json")["annotations"]
                  if a["kind"] == "divergence"]
        self.assertFalse(any("rolled back" in t for t in events), events)

    def test_stop_policy(self):
        e = self.e
        self.fails(["train", e.spec(), *self.ARGS, "--checkpoint-every", "2",
                    "--on-divergence", "stop"], "divergence at step", "NaN")
        events = [(a["kind"], a["text"]) for a in
                  e.json("run", "show", "1", "--json")["annotations"]]
        self.assertEqual(len(events), 1, events)
        self.assertNotIn("rolled back", events[0][1])
        self.assertEqual(e.status(1), "failed")


    def test_spike_check_can_be_set_off(self):
        """The spike test can be tuned or switched off, by flag or in the spec (a
        converged run's shrinking norms made one hard batch look like a blow-up,
        with no way out), and the setting is recorded for --resume."""
        e = self.e
        spec = json.load(open(e.spec()))
        spec.setdefault("training", {})["divergence_spike_factor"] = 0
        path = os.path.join(self.tmp, "no-spike.json")
        json.dump(spec, open(path, "w"))
        quick = ["--epochs", "1", "--dataset", "synthetic", "--limit", "64", "--quiet"]
        e.ok("train", path, *quick)
        e.ok("train", e.spec(), *quick, "--divergence-spike-factor", "25")
        got = [json.loads(c)["divergence_spike_factor"]
               for (c,) in e.sql("SELECT config_json FROM runs ORDER BY id")]
        self.assertEqual(got, [0, 25])


class CsvResume(Base):
    """A CSV run resumes from another folder (its --data-dir is recorded
    absolute), and says so when the file changed since (it trained on)."""

    def test_resume_elsewhere_and_changed_file(self):
        e = self.e
        data = os.path.join(self.tmp, "data")
        os.makedirs(data)

        def write_rows(scale):
            with open(os.path.join(data, "rows.csv"), "w") as f:
                for i in range(60):
                    f.write("%g,%g,%d\n" % (scale * (i % 7), scale * (i % 5), i % 2))

        write_rows(1.0)
        spec = os.path.join(self.tmp, "lin.json")
        json.dump({"name": "lin", "input": {"shape": [2]},
                   "nodes": [{"name": "fc", "type": "Linear", "out_features": 2}],
                   "training": {"epochs": 4, "batch_size": 4, "lr": 0.01}}, open(spec, "w"))
        here = os.getcwd()
        e.exe = os.path.abspath(e.exe)  # (given relative to the build folder)
        try:
            os.chdir(data)  # a relative --data-dir
            p = e.ok("train", spec, "--dataset", "csv", "--data-dir", "rows.csv",
                     "--stop-after-steps", "5", "--checkpoint-every", "5", "--quiet")
            # the spec's own relative "data_dir" too
            spec2 = os.path.join(self.tmp, "lin-csv.json")
            json.dump({"name": "lin", "input": {"shape": [2]},
                       "nodes": [{"name": "fc", "type": "Linear", "out_features": 2}],
                       "training": {"epochs": 1, "batch_size": 4, "lr": 0.01,
                                    "dataset": "csv", "data_dir": "rows.csv"}}, open(spec2, "w"))
            e.ok("train", spec2, "--quiet")
        finally:
            os.chdir(here)
        for (config,) in e.sql("SELECT config_json FROM runs ORDER BY id"):
            self.assertEqual(json.loads(config)["data_dir"], os.path.join(data, "rows.csv"))
        p = e.ok("train", "--resume", "1", "--quiet")  # from another folder
        self.assertNotIn("changed", p.stderr)
        # stopped again, the file rewritten: the resume says so
        p = e.ok("train", spec, "--dataset", "csv", "--data-dir", os.path.join(data, "rows.csv"),
                 "--stop-after-steps", "5", "--checkpoint-every", "5", "--quiet")
        write_rows(2.0)
        p = e.ok("train", "--resume", "4", "--quiet")
        self.assertIn("the dataset's files changed since run 4 read them", p.stderr)


class OddText(Base):
    def test_names_tags_notes_that_are_not_plain_text(self):
        """A run name with bytes that are not UTF-8 and a newline, a tag holding an
        escape sequence: JSON keeps them (U+FFFD for the bad bytes; they were null),
        tables spell the control characters out (the newline split the row, the
        escape sequence reached the terminal)."""
        e = self.e
        name = os.fsdecode(b"bad\xffname\nsecond")
        e.ok("train", *self.quick_train_args(), "--name", name)
        e.ok("run", "tag", "1", "color=\x1b[2J\x1b[31mred")
        e.ok("run", "note", "1", os.fsdecode(b"note \xc3"))
        runs = e.json("runs", "--json")
        self.assertEqual(runs[0]["name"], "bad\ufffdname\nsecond")
        table = e.ok("runs").stdout
        self.assertEqual(len(table.strip().splitlines()), 2, table)  # header and one row
        self.assertIn("bad\ufffdname\\nsecond", table)
        show = e.ok("run", "show", "1").stdout
        self.assertNotIn("\x1b", show)
        self.assertIn("\\x1b[2J", show)
        notes = [a for a in e.json("run", "show", "1", "--json")["annotations"]
                 if a["kind"] == "note"]
        self.assertEqual(notes[0]["text"], "note \ufffd")
        # wide characters take two columns: the next column stays aligned
        e.ok("train", *self.quick_train_args(), "--name", "模型实验")

        def col(line, text):  # the terminal column where text starts in line
            i = line.index(text)
            return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line[:i])
        lines = e.ok("runs").stdout.splitlines()
        row = [ln for ln in lines if "模型实验" in ln][0]
        self.assertEqual(col(row, "fmnist-mlp"), col(lines[0], "MODEL"), lines)


class BadArguments(Base):
    def test_unknown_things_exit_1(self):
        e = self.e
        self.fails(["run", "show", "1"], "registry")  # no registry yet
        self.fails(["train", "--resume", "latest"], "holds no runs yet")
        e.train(*self.quick_train_args())
        self.fails(["run", "show", "42"], "no run 42")
        self.fails(["run", "show", "abc"], "abc")
        self.fails(["metrics", "42", "loss"], "42")
        self.fails(["metrics", "1", "nokey"], "nokey", "loss")
        self.fails(["compare", "1", "42"], "42")
        self.fails(["compare", "1", "latest"], "given twice")  # JSON kept one of the two
        # an empty --registry (an unset variable) is not the default registry, and a
        # file or a broken registry.db link is not "no runs yet" (exit 0 before)
        self.fails(["runs", "--registry", ""], "empty path")
        afile = os.path.join(self.tmp, "afile")
        open(afile, "w").close()
        self.fails(["runs", "--registry", afile], "is a file, not a folder")
        self.fails(["models", "--registry", afile], "is a file, not a folder")
        dangling = os.path.join(self.tmp, "unmounted")
        os.makedirs(dangling)
        os.symlink("/nonexistent/registry.db", os.path.join(dangling, "registry.db"))
        self.fails(["runs", "--registry", dangling], "registry.db")
        self.fails(["run", "delete", "42"], "42")
        self.fails(["run", "tag", "42", "a=b"], "42")
        self.fails(["model", "versions", "nope"], "nope")
        self.fails(["model", "history", "nope"], "nope")
        self.fails(["model", "register", "42", "--name", "m"], "42")
        self.fails(["model", "promote", "nope", "1", "--alias", "production"], "nope")
        e.ok("model", "register", "1", "--name", "m")
        self.fails(["model", "promote", "m", "7", "--alias", "production"], "7")
        self.fails(["model", "rollback", "m", "--alias", "production"], "production")
        e.ok("model", "promote", "m", "1", "--alias", "production")
        self.fails(["model", "rollback", "m", "--alias", "production"], "production")
        self.fails(["train", "--resume", "42"], "42")
        self.assertEqual(e.integrity(), "ok")

    def test_usage_errors_exit_2(self):
        e = self.e
        spec = e.spec()
        for args, needle in (
                (["runs", "--limit", "0"], "--limit"),
                (["runs", "--status", "sleeping"], "sleeping"),
                # eval refuses what it would not use (it evaluated in f32 on every sample)
                (["eval", spec, "--weights", "w.st", "--amp", "bf16"], "--amp is an 'ember train'"),
                (["eval", spec, "--weights", "w.st", "--limit", "5"], "--limit is an 'ember train'"),
                (["eval", spec, "--weights", "w.st", "--save", "x.st"], "--save is an 'ember train'"),
                (["train", spec, "--amp-init-scale", "8"], "give --amp-scaler"),
                (["runs", "--frobnicate"], "--frobnicate"),
                (["runs", "extra"], "extra"),
                (["run"], "run"),
                (["run", "explode", "1"], "explode"),
                (["run", "show"], "run show"),
                (["run", "tag", "1", "novalue"], "KEY=VALUE"),
                (["compare", "1"], "compare"),
                (["metrics", "1"], "metrics"),
                (["metrics", "1", "loss", "--csv", "--json"], "--csv"),
                (["model"], "model"),
                (["model", "register", "1"], "--name"),
                (["model", "promote", "m", "1"], "--alias"),
                (["model", "promote", "m", "x", "--alias", "a"], "VERSION"),
                (["model", "register", "1", "--name", "m", "--checkpoint", "worst"], "worst"),
                # names the registry would refuse: usage errors, by its rule (exit 1 before)
                (["model", "promote", "m", "1", "--alias", "bad alias!"], "alias name"),
                (["model", "promote", "m", "1", "--alias", "-x"], "not starting with"),
                (["model", "promote", "m", "1", "--alias", "007"], "version number"),
                (["model", "register", "1", "--name", "a b/c@d"], "model name"),
                # an '@' but not NAME@SELECTOR: was taken for a spec ("needs --weights")
                (["export", "fm@"], "not a model reference"),
                (["predict", "@1", "x.png"], "not a model reference"),
                (["serve", "fm@"], "not a model reference"),
                (["train", spec, "--no-record", "--checkpoint-every", "5"], "--checkpoint-dir"),
                (["train", spec, "--checkpoint-dir", self.tmp], "--no-record"),
                (["train", spec, "--on-divergence", "panic"], "panic"),
                (["train", spec, "--divergence-lr-factor", "2"], "--divergence-lr-factor"),
                (["train", spec, "--divergence-spike-factor", "0.5"], "above 1"),
                (["train", spec, "--keep-checkpoints", "0"], "--keep-checkpoints"),
                (["train", "--resume", "1", "--lr", "0.1"], "--lr"),
                (["train", "--resume", "1", "--init", "w.st"], "--init"),
                (["train"], "SPEC")):
            self.fails(args, needle, code=2)
        self.assertFalse(os.path.exists(e.db), "a usage error created a registry")


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
