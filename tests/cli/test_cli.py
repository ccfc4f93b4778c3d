"""The `ember` command line from a user's side: a short training run that
must reach a stated accuracy, `info`, `eval`, and bad input of every kind,
each of which must end with a clear message and a non-zero exit, never a
crash (this suite also runs against the AddressSanitizer build).

EMBER_HOME points at a temporary folder for the whole suite, so nothing
here touches the user's registry; training runs pass --no-record (the
registry has its own suites: test_registry.py, test_registry_bad.py,
test_kill.py).

usage: test_cli.py EMBER SOURCE_ROOT
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

EMBER = SOURCE = None
DATA = "/usr/share/datasets/fashion-mnist"
HAVE_DATA = os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))


def run(*args, check_ok=None):
    p = subprocess.run([EMBER] + list(args), capture_output=True, text=True, timeout=600)
    # A signal (negative code) or a sanitizer report is a crash, whatever the test.
    assert p.returncode >= 0, "ember crashed with signal %d: %s" % (-p.returncode, p.stderr[-2000:])
    assert "Sanitizer" not in p.stderr, p.stderr[-4000:]
    assert "internal error" not in p.stderr, p.stderr[-2000:]
    return p


def spec_path(name):
    return os.path.join(SOURCE, "data", "models", name)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w" if isinstance(text, str) else "wb") as f:
            f.write(text)
        return path

    def poke_value(self, path, tensor, value):
        """Sets the first value of a float tensor in a safetensors file."""
        with open(path, "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            f.seek(8 + n + header[tensor]["data_offsets"][0])
            f.write(struct.pack("<f", value))

    def mlp_spec(self, **changes):
        with open(spec_path("fmnist-mlp.json")) as f:
            spec = json.load(f)
        for k, v in changes.items():
            spec[k] = v
        return spec

    def fails(self, args, *needles, code=None):
        p = run(*args)
        self.assertNotEqual(p.returncode, 0, "expected failure for %s" % (args,))
        if code is not None:
            self.assertEqual(p.returncode, code, p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertTrue(any(line.startswith("ember: ") for line in p.stderr.splitlines()),
                        p.stderr)
        return p


class Info(Base):
    def test_info_tables(self):
        p = run("info", spec_path("fmnist-mlp.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fc1", p.stdout)
        self.assertIn("235,146", p.stdout.replace(" 235146", " 235,146"))
        p = run("info", spec_path("fmnist-cnn.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("421,642", p.stdout.replace(" 421642", " 421,642"))

    def test_names_are_escaped(self):
        """A spec's name and description are free text: control characters and escape
        sequences in them are spelled out wherever they are printed, never sent to the
        terminal (they could clear it, retitle it or fake a line)."""
        spec = self.mlp_spec(name="evil\x1b[2J\x1b]0;pwned\x07\nember: ok",
                             description="d\x1b[31mred\r\u009b2J")
        path = self.write("evil.json", json.dumps(spec))
        p = run("info", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("\x1b", p.stdout)
        self.assertNotIn("\x07", p.stdout)
        self.assertIn("model: evil\\x1b[2J\\x1b]0;pwned\\x07\\nember: ok\n", p.stdout)
        self.assertIn("  d\\x1b[31mred\\r\\u009b2J\n", p.stdout)
        self.assertNotIn("\u009b", p.stdout)
        self.assertIn("fc1", p.stdout)
        p = run("train", path, "--epochs", "1", "--dataset", "synthetic", "--limit", "64",
                "--no-record", "--threads", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("\x1b", p.stderr)
        self.assertIn("training evil\\x1b[2J", p.stderr)
        w = os.path.join(self.tmp, "w.safetensors")
        p = run("train", path, "--epochs", "0", "--no-record", "--quiet", "--save", w)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("export", path, "--weights", w, "-o", os.path.join(self.tmp, "m.onnx"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("\x1b", p.stdout)
        self.assertIn("exported evil\\x1b[2J", p.stdout)
        p = run("profile", path, "--steps", "1", "--dataset", "synthetic", "--threads", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("\x1b", p.stdout)
        self.assertIn("ember profile: evil\\x1b[2J", p.stdout)

    def test_help(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("--no-shuffle", p.stdout)


class BadSpec(Base):
    def test_missing_file(self):
        self.fails(["info", os.path.join(self.tmp, "nope.json")], "nope.json")

    def test_fifo_spec(self):
        """A FIFO nobody writes to is 'not a regular file', not 'not valid JSON'; a pipe
        that holds a spec (as <(...) gives) is still read."""
        fifo = os.path.join(self.tmp, "spec.fifo")
        os.mkfifo(fifo)
        self.fails(["info", fifo], fifo, "not a regular file", code=1)
        p = subprocess.run(["bash", "-c", '"$0" info <(cat "$1")', EMBER,
                            spec_path("fmnist-mlp.json")], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fc1", p.stdout)

    def test_malformed_json(self):
        path = self.write("bad.json", '{"name": "x", "nodes": [ {"name": "a", }')
        self.fails(["info", path], "bad.json", "not valid JSON", code=1)  # not a JSON text

    def test_unknown_node_attribute(self):
        spec = self.mlp_spec()
        spec["nodes"][1]["kernel"] = 3
        self.fails(["info", self.write("s.json", json.dumps(spec))], "fc1", "kernel", code=2)

    def test_spec_errors_exit_2_in_every_part(self):
        """An unknown or mistyped key is the same kind of error, exit 2, whichever part of
        the spec holds it (the model part exited 1, "training" 2)."""
        for change in ({"optimiser": "sgd"}, {"name": 3}, {"nodes": {}}, {"input": []}):
            spec = self.mlp_spec(**change)
            path = self.write("s.json", json.dumps(spec))
            self.fails(["info", path], list(change)[0], code=2)
            self.fails(["train", path, "--epochs", "0", "--no-record"], list(change)[0], code=2)
        spec = self.mlp_spec()
        spec["nodes"][1]["out_features"] = "many"
        self.fails(["info", self.write("s.json", json.dumps(spec))], "out_features", code=2)

    def test_unknown_training_key(self):
        spec = self.mlp_spec()
        spec["training"]["learning_rate"] = 0.1
        self.fails(["train", self.write("s.json", json.dumps(spec)), "--epochs", "0"],
                   "learning_rate", code=2)

    def test_wrong_type(self):
        spec = self.mlp_spec()
        spec["training"]["batch_size"] = "big"
        self.fails(["train", self.write("s.json", json.dumps(spec)), "--epochs", "0"],
                   "batch_size", code=2)

    def test_shape_mismatch(self):
        spec = self.mlp_spec()
        spec["nodes"][3]["in_features"] = 100  # fc2 gets 256
        self.fails(["info", self.write("s.json", json.dumps(spec))], "fc2")

    def test_absurd_size(self):
        spec = self.mlp_spec()
        spec["nodes"][1]["out_features"] = 10 ** 12
        self.fails(["info", self.write("s.json", json.dumps(spec))], "fc1")

    def test_unknown_layer_type(self):
        spec = self.mlp_spec()
        spec["nodes"][2]["type"] = "ReLu"
        self.fails(["info", self.write("s.json", json.dumps(spec))], "ReLu", code=2)

    @unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not installed")
    def test_too_few_outputs_for_classes(self):
        spec = self.mlp_spec()
        spec["nodes"][5]["out_features"] = 5
        self.fails(["train", self.write("s.json", json.dumps(spec)), "--epochs", "1",
                    "--limit", "256"], "10 classes")

    def test_index_input_on_an_image_dataset(self):
        spec = {"name": "embed", "input": {"shape": [8], "dtype": "i64"},
                "nodes": [{"name": "emb", "type": "Embedding", "num_embeddings": 100,
                           "embedding_dim": 4}, {"name": "flat", "type": "Flatten"},
                          {"name": "fc", "type": "Linear", "out_features": 10}],
                "training": {"dataset": "synthetic", "optimizer": "sgd", "lr": 0.1}}
        p = self.fails(["train", self.write("e.json", json.dumps(spec)), "--epochs", "1",
                        "--limit", "256", "--no-record"], "i64 indices", "synthetic")
        self.assertNotIn("training stopped", p.stderr)  # refused before it starts


class FlagOrder(Base):
    def test_optimizer_flags_in_any_order(self):
        """--optimizer resets its optimiser's settings: flags given before it still count."""
        blobs = []
        for flags in (["--momentum", "0.5", "--weight-decay", "0.01", "--optimizer", "sgd"],
                      ["--optimizer", "sgd", "--momentum", "0.5", "--weight-decay", "0.01"],
                      ["--optimizer", "sgd"]):
            w = os.path.join(self.tmp, "w%d.safetensors" % len(blobs))
            p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--dataset",
                    "synthetic", "--limit", "256", "--batch", "32", "--seed", "4", "--threads", "1",
                    "--no-record", "--quiet", "--save", w, *flags)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(w, "rb") as f:
                blobs.append(f.read())
        self.assertTrue(blobs[0] == blobs[1], "flag order changed the result")
        self.assertFalse(blobs[0] == blobs[2], "--momentum and --weight-decay had no effect")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--optimizer", "adam",
                "--momentum", "0.9")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--momentum applies to SGD only", p.stderr)

    def train_blob(self, name, *flags):
        w = os.path.join(self.tmp, name + ".safetensors")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--dataset", "synthetic",
                "--limit", "256", "--batch", "32", "--seed", "4", "--threads", "1", "--no-record",
                "--quiet", "--save", w, *flags)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(w, "rb") as f:
            return f.read(), p.stderr

    def test_optimizer_takes_its_defaults(self):
        """Another optimiser than the spec's takes all its defaults, lr included (the
        spec's SGD lr 0.1 is not Adam's), and says so; the last --optimizer wins."""
        adam, err = self.train_blob("adam", "--optimizer", "adam")
        self.assertIn("--optimizer adam: lr 0.001, its default", err)
        adam_lr, err = self.train_blob("adam-lr", "--lr", "0.001", "--optimizer", "adam")
        self.assertNotIn("its default", err)
        self.assertTrue(adam == adam_lr, "--optimizer adam did not take lr 0.001")
        plain, _ = self.train_blob("plain")
        last, _ = self.train_blob("last", "--optimizer", "adam", "--optimizer", "sgd")
        self.assertTrue(plain == last, "an earlier --optimizer still reset the spec's settings")

    def test_schedule_flags_say_where_settings_go(self):
        """A schedule's parameters come from the spec: the errors say where; --warmup-steps
        for a schedule without a warm-up is said to do nothing."""
        spec = spec_path("fmnist-mlp.json")
        self.fails(["train", spec, "--epochs", "1", "--limit", "64", "--no-record",
                    "--schedule", "step"], '"schedule": {"type": "step", "step_size": N', code=2)
        self.fails(["train", spec, "--epochs", "1", "--limit", "64", "--no-record",
                    "--schedule", "warmup"], "--warmup-steps N", code=2)
        p = run("train", spec, "--epochs", "0", "--no-record", "--warmup-steps", "5")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--warmup-steps applies to the warmup and warmup-cosine schedules", p.stderr)


class RunEdges(Base):
    ARGS = ["--dataset", "synthetic", "--threads", "1", "--no-record", "--quiet"]

    def last_json(self, p):
        return json.loads(p.stdout.strip().splitlines()[-1])

    def test_divergence_before_the_first_checkpoint(self):
        """With checkpoints on, a divergence before the first one says so, rather than
        advising to turn on the checkpoints already on."""
        spec = json.load(open(spec_path("fmnist-mlp.json")))
        spec["training"]["schedule"] = {"type": "step", "step_size": 2, "gamma": 1e9}
        boom = self.write("boom.json", json.dumps(spec))
        p = run("train", boom, "--epochs", "1", "--checkpoint-every", "50", "--checkpoint-dir",
                os.path.join(self.tmp, "ck"), *self.ARGS)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("before any checkpoint was written", p.stderr)
        self.assertNotIn("or periodic checkpoints (--checkpoint-every)", p.stderr)

    def test_epochs_0_reads_no_data(self):
        """--epochs 0 --save writes the initial weights without reading a dataset: a
        spec no dataset here feeds (an Embedding's i64 indices) gets them too (it was
        refused by the dataset check, so such a model had no way to weights)."""
        emb = self.write("emb.json", json.dumps({
            "name": "emb", "input": {"shape": [6], "dtype": "i64"}, "nodes": [
                {"name": "e", "type": "Embedding", "num_embeddings": 50, "embedding_dim": 8},
                {"name": "f", "type": "Flatten"},
                {"name": "fc", "type": "Linear", "out_features": 10}]}))
        w = os.path.join(self.tmp, "emb.safetensors")
        p = run("train", emb, "--epochs", "0", "--save", w, "--no-record", "--data-dir",
                os.path.join(self.tmp, "nothing-here"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(w, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        self.assertEqual(header["e.weight"]["shape"], [50, 8])
        p = run("export", emb, "--weights", w, "-o", os.path.join(self.tmp, "emb.onnx"))
        self.assertEqual(p.returncode, 0, p.stderr)
        # training it still needs data that fits
        p = run("train", emb, "--epochs", "1", "--no-record", "--dataset", "synthetic")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("i64", p.stderr)

    def test_flags_that_do_nothing_say_so(self):
        """A flag that cannot act in this run warns; numbers parse as decimals."""
        spec = spec_path("fmnist-mlp.json")
        with open(spec) as f:
            mse = json.load(f)
        mse["loss"] = {"type": "mse"}
        mse_path = self.write("mse.json", json.dumps(mse))
        for args, needle in (
                ([mse_path, "--label-smoothing", "0.1"], "--label-smoothing applies to the "
                                                         "cross_entropy loss"),
                ([spec, "--dataset", "synthetic", "--data-dir", self.tmp],
                 "--data-dir is not read by the synthetic"),
                ([spec, "--name", "x"], "--name is for recorded runs"),
                ([spec, "--keep-checkpoints", "2"], "--keep-checkpoints is for recorded runs"),
                ([spec, "--on-divergence", "rollback"], "nothing to roll back to"),
                ([spec, "--device", "ref", "--amp", "f16"], "--amp f16 without --amp-scaler")):
            p = run("train", *args, "--epochs", "0", "--no-record")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(needle, p.stderr)
        p = run("train", spec, "--epochs", "1", "--limit", "256", "--profile",
                os.path.join(self.tmp, "p.json"), *self.ARGS)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("the run had 2 batches, and the profiled window starts after 5", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "p.json")))
        p = run("train", spec, "--epochs", "0", "--no-record", "--lr", "1e-320")
        self.assertEqual(p.returncode, 0, p.stderr)  # underflows to a subnormal: still a number
        self.fails(["train", spec, "--epochs", "0", "--no-record", "--lr", "0x10"], "--lr", code=2)
        self.fails(["train", spec, "--epochs", "0", "--no-record", "--divergence-spike-factor",
                    "1"], "--divergence-spike-factor must be above 1", code=2)

    def test_outputs_checked_before_training(self):
        for args, needle in ((["--save", ""], "needs a file name"),
                             (["--save", self.tmp], "is a folder"),
                             (["--profile", "/nonexistent/p.json"], "cannot write in the folder")):
            p = self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--limit",
                            "64"] + self.ARGS + args, needle, code=2)
            self.assertNotIn("steps", p.stdout)  # nothing trained

    def test_stop_after_the_last_step_is_complete(self):
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--limit", "256",
                "--batch", "64", "--stop-after-steps", "4", *self.ARGS)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(self.last_json(p)["stopped"])
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--limit", "256",
                "--batch", "64", "--stop-after-steps", "3", *self.ARGS)
        self.assertTrue(self.last_json(p)["stopped"])

    def test_gpu_amp_mode_on_the_cpu_is_a_usage_error(self):
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--limit", "64",
                    "--amp", "f16"] + self.ARGS, "GPU mode", "bf16", code=2)

    def test_drop_last_with_no_whole_batch(self):
        spec = self.mlp_spec()
        spec["training"]["drop_last"] = True
        self.fails(["train", self.write("d.json", json.dumps(spec)), "--epochs", "2", "--limit",
                    "5", "--batch", "7"] + self.ARGS, "gives no batch", "training did not start")

    def test_nan_metrics_are_null(self):
        """A training whose evaluation overflows (its own steps did not): the JSON keeps
        its keys, as null (json_real(NaN) is NULL: the key vanished)."""
        spec = {"name": "tiny", "input": {"shape": [1, 28, 28]},
                "nodes": [{"name": "flatten", "type": "Flatten"},
                          {"name": "fc1", "type": "Linear", "out_features": 16},
                          {"name": "relu1", "type": "ReLU"},
                          {"name": "fc2", "type": "Linear", "out_features": 10}],
                "training": {"dataset": "synthetic", "optimizer": "sgd", "lr": 0.05}}
        p = run("train", self.write("t.json", json.dumps(spec)), "--epochs", "1", "--limit",
                "64", "--batch", "16", "--lr", "1e6", *self.ARGS)
        self.assertEqual(p.returncode, 0, p.stderr)
        res = self.last_json(p)
        self.assertIsNone(res["test_loss"])
        self.assertIn("test_accuracy", res)


class BadFlags(Base):
    def test_bad_numbers(self):
        self.fails(["train", spec_path("fmnist-mlp.json"), "--lr", "abc"], "--lr", code=2)
        self.fails(["train", spec_path("fmnist-mlp.json"), "--batch", "0"], "--batch", code=2)
        self.fails(["train", spec_path("fmnist-mlp.json"), "--optimizer", "rmsprop"],
                   "--optimizer", code=2)
        self.fails(["train", spec_path("fmnist-mlp.json"), "--schedule", "zigzag"], "zigzag",
                   code=2)
        self.fails(["train", spec_path("fmnist-mlp.json"), "--frobnicate"], "--frobnicate", code=2)
        self.fails(["train", spec_path("fmnist-mlp.json"), "--lr"], "--lr", code=2)
        self.fails(["frobnicate"], "unknown command", code=2)

    def test_settings_flags(self):
        """The settings table's flags: --help prints each with its range, and a value just
        past that range is a usage error naming the flag (the same table bounds the spec,
        validate and the workbench: tests/engine/train/test-settings.c)."""
        import re
        p = run("--help")
        section = p.stdout.split("train settings")[1].split("other train options")[0]
        ranged, flag = [], None
        for line in section.splitlines():
            m = re.match(r"  --([a-z-]+)", line)
            r = re.match(r"\s+\((\S+) to (\S+)\)$", line)
            if m:
                flag = m.group(1)
            elif r:
                ranged.append((flag, r.group(1), r.group(2)))
        self.assertGreater(len(ranged), 15)
        for flag, lo, hi in ranged:
            whole = "." not in hi and "e" not in hi
            past = str(int(hi) + 1) if whole else repr(float(hi) * 10)
            self.fails(["train", spec_path("fmnist-mlp.json"), "--" + flag, past],
                       "--" + flag, code=2)

    def test_quantize_flag(self):
        # --quantize goes through the shared train/eval flags: eval takes it,
        # train refuses it by name, a bad mode is a usage error either way
        self.fails(["train", spec_path("fmnist-mlp.json"), "--quantize", "int8"],
                   "'ember eval' option", code=2)
        self.fails(["eval", spec_path("fmnist-mlp.json"), "--weights", "w.safetensors",
                    "--quantize", "int4"], "--quantize", code=2)
        self.fails(["eval", spec_path("fmnist-mlp.json"), "--quantize"], "--quantize", code=2)


class BadData(Base):
    def test_missing_dataset(self):
        self.fails(["train", spec_path("fmnist-mlp.json"), "--data-dir",
                    os.path.join(self.tmp, "none")], "none")

    @unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not installed")
    def test_truncated_dataset(self):
        d = os.path.join(self.tmp, "fm")
        os.mkdir(d)
        for name in os.listdir(DATA):
            shutil.copy(os.path.join(DATA, name), d)
        with gzip.open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")) as f:
            raw = f.read()
        with gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz"), "wb") as f:
            f.write(raw[: len(raw) // 2])
        self.fails(["train", spec_path("fmnist-mlp.json"), "--data-dir", d, "--limit", "128"],
                   "t10k-images")

    def test_corrupt_weights(self):
        bad = self.write("w.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", bad],
                   "w.safetensors")
        short = self.write("s.safetensors", b"\x01\x02")
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", short],
                   "s.safetensors")

    def test_nonfinite_weights(self):
        w = os.path.join(self.tmp, "w.safetensors")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--save", w)
        self.assertEqual(p.returncode, 0, p.stderr)
        for value in (float("nan"), float("inf")):
            self.poke_value(w, "fc2.bias", value)
            for args in (["train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", w],
                         ["export", spec_path("fmnist-mlp.json"), "--weights", w, "-o",
                          os.path.join(self.tmp, "m.onnx")]):
                self.fails(args, "w.safetensors", "fc2.bias", "NaN or infinite")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "m.onnx")))

    def test_checkpoint_as_weights_is_checked(self):
        """A training checkpoint used as weights (a registered version's file) is
        checked against its checksum, as resuming checks it."""
        d = os.path.join(self.tmp, "ck")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--dataset", "synthetic",
                "--limit", "256", "--no-record", "--checkpoint-dir", d, "--checkpoint-every", "2",
                "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        ck = os.path.join(d, sorted(os.listdir(d))[-1])
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", ck)
        self.assertEqual(p.returncode, 0, p.stderr)  # whole: loads
        self.poke_value(ck, "fc3.weight", 0.0)
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", ck],
                   os.path.basename(ck), "corrupt")

    def test_csv_label_past_the_outputs_names_its_line(self):
        """A CSV label the model has no output for is named by its line, not read as a
        model that needs more outputs ("the last layer needs 8 outputs")."""
        rows = os.path.join(self.tmp, "typo.csv")
        with open(rows, "w") as f:
            for i in range(50):
                f.write("0.1,0.2,0.3,0.4,%d\n" % (7 if i == 33 else i % 3))
        spec = os.path.join(self.tmp, "csvlin.json")
        with open(spec, "w") as f:
            json.dump({"name": "csvlin", "input": {"shape": [4]},
                       "nodes": [{"name": "fc", "type": "Linear", "out_features": 3}]}, f)
        self.fails(["train", spec, "--dataset", "csv", "--data-dir", rows, "--no-record"],
                   "line 34, column 5: label 7 is out of range for 3 classes", code=1)

    def test_checkpoint_write_failure_keeps_save(self):
        """A checkpoint that cannot be written (files capped at 1.5 MB: a checkpoint
        holds the weights and the optimiser's state, 1.9 MB; the weights alone are
        0.9 MB) fails the run, but --save still gets the trained weights (it was not
        written: the training was lost)."""
        import resource
        import signal as sig
        d, w = os.path.join(self.tmp, "ck"), os.path.join(self.tmp, "kept.safetensors")

        def cap():
            sig.signal(sig.SIGXFSZ, sig.SIG_IGN)  # a write past the cap fails (EFBIG)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1500000, 1500000))
        p = subprocess.run([EMBER, "train", spec_path("fmnist-mlp.json"), "--epochs", "1",
                            "--dataset", "synthetic", "--no-record", "--checkpoint-dir", d,
                            "--save", w, "--quiet", "--threads", "1"],
                           capture_output=True, text=True, timeout=600, preexec_fn=cap)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("cannot write", p.stderr)
        self.assertIn("are in %s all the same" % w, p.stderr)
        q = run("eval", spec_path("fmnist-mlp.json"), "--weights", w, "--dataset", "synthetic")
        self.assertEqual(q.returncode, 0, q.stderr)

    def test_weights_of_another_model(self):
        cnn = os.path.join(self.tmp, "cnn.safetensors")
        p = run("train", spec_path("fmnist-cnn.json"), "--epochs", "0", "--save", cnn)
        self.assertEqual(p.returncode, 0, p.stderr)
        # another model's tensors do not fit this one: a usage error (exit 2), as a
        # wrong shape or a missing tensor is
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", cnn],
                   "cnn.safetensors", code=2)
        # export says so as eval and predict do (it exited 1)
        self.fails(["export", spec_path("fmnist-mlp.json"), "--weights", cnn, "-o",
                    os.path.join(self.tmp, "x.onnx")], "cnn.safetensors", code=2)
        # and an -o that is no file is refused before any work, as train --save's is
        for bad in (self.tmp, os.devnull):
            self.fails(["export", spec_path("fmnist-cnn.json"), "--weights", cnn, "-o", bad],
                       bad, code=2)
        # this model's weights and one tensor more
        mlp = os.path.join(self.tmp, "mlp.safetensors")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--save", mlp)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(mlp, "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
        header["extra.weight"] = {"dtype": "F32", "shape": [1],
                                  "data_offsets": [len(data), len(data) + 4]}
        text = json.dumps(header).encode()
        with open(mlp, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data + b"\0\0\0\0")
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--init", mlp],
                   "'extra.weight' that this model does not have", code=2)


@unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not installed")
class Training(Base):
    def test_subset_reaches_accuracy_and_eval_agrees(self):
        w = os.path.join(self.tmp, "mlp.safetensors")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--limit", "10000",
                "--save", w, "--seed", "3", "--no-record")
        self.assertEqual(p.returncode, 0, p.stderr)
        res = json.loads(p.stdout.strip().splitlines()[-1])
        for key in ("test_accuracy", "test_loss", "train_samples_per_sec", "epochs", "steps",
                    "peak_rss_mb"):
            self.assertIn(key, res)
        self.assertEqual(res["epochs"], 1)
        self.assertEqual(res["steps"], 79)  # ceil(10000 / 128)
        self.assertGreaterEqual(res["test_accuracy"], 0.75)  # stated: 75% after 10k samples
        p = run("eval", spec_path("fmnist-mlp.json"), "--weights", w)
        self.assertEqual(p.returncode, 0, p.stderr)
        ev = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertAlmostEqual(ev["test_accuracy"], res["test_accuracy"], places=6)

    def test_overflowing_outputs_give_valid_json(self):
        """Finite weights whose outputs overflow: eval says so, and its JSON stays JSON."""
        w = os.path.join(self.tmp, "w.safetensors")
        p = run("train", spec_path("fmnist-mlp.json"), "--epochs", "0", "--save", w)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.poke_value(w, "fc3.bias", 3e38)
        self.poke_value(w, "fc2.bias", 3e38)
        p = run("eval", spec_path("fmnist-mlp.json"), "--weights", w)
        self.assertEqual(p.returncode, 0, p.stderr)
        ev = json.loads(p.stdout.strip().splitlines()[-1])  # no bare nan
        self.assertIsNone(ev["test_loss"])
        self.assertIn("overflow", p.stderr)

    def test_same_seed_same_weights(self):
        """The same seed and thread count give bit-identical weights."""
        for model, limit in (("fmnist-mlp.json", "1024"), ("fmnist-cnn.json", "512")):
            blobs, outs = [], []
            for k in range(2):
                w = os.path.join(self.tmp, "w%d.safetensors" % k)
                p = run("train", spec_path(model), "--epochs", "1", "--limit", limit,
                        "--seed", "11", "--threads", "2", "--save", w, "--no-record")
                self.assertEqual(p.returncode, 0, p.stderr)
                outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
                with open(w, "rb") as f:
                    blobs.append(f.read())
            self.assertEqual(outs[0]["train_loss"], outs[1]["train_loss"], model)
            self.assertEqual(outs[0]["test_loss"], outs[1]["test_loss"], model)
            self.assertTrue(blobs[0] == blobs[1], model + ": weights differ between runs")

    def test_label_smoothing_on_mse_is_a_spec_error(self):
        # it was ignored without a word (the --label-smoothing flag warned)
        spec = self.mlp_spec(loss={"type": "mse", "label_smoothing": 0.1})
        path = self.write("mse.json", json.dumps(spec))
        self.fails(["train", path, "--epochs", "0"], "label_smoothing applies to cross_entropy")

    def test_nan_loss_is_reported(self):
        self.fails(["train", spec_path("fmnist-mlp.json"), "--epochs", "1", "--limit", "2048",
                    "--lr", "1000000", "--no-record"], "NaN")


    def test_batch_past_free_memory_is_refused_on_the_cpu(self):
        """A batch past the memory this process may take (here ulimit -v 3 GB, as a
        small machine or a container has it) is refused before training, naming a
        batch that fits, by train and profile; it aborted mid-step on the host
        allocator's failure ('internal error: assertion ... out of memory')."""
        with open(EMBER, "rb") as f:
            if b"__asan_init" in f.read():
                self.skipTest("AddressSanitizer maps terabytes of address space: no ulimit -v")
        cnn = spec_path("fmnist-cnn.json")
        for cmd in (["train", cnn, "--epochs", "1", "--no-record"],
                    ["profile", cnn, "--steps", "1"]):
            p = subprocess.run(["bash", "-c", 'ulimit -v 3000000 && exec "$0" "$@"', EMBER] + cmd +
                               ["--batch", "60000", "--threads", "1"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("pre-flight", p.stderr)
            self.assertIn("the largest batch that fits is about", p.stderr)
            self.assertNotIn("internal error", p.stderr)
            self.assertIn("--no-preflight skips this check", p.stderr)  # profile takes it too
        p = run("profile", spec_path("fmnist-mlp.json"), "--no-preflight", "--steps", "1",
                "--batch", "32", "--threads", "1")
        self.assertEqual(p.returncode, 0, p.stderr)

if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    home = tempfile.mkdtemp(prefix="ember-cli-home-")
    os.environ["EMBER_HOME"] = home
    try:
        unittest.main(argv=[sys.argv[0], "-v"])
    finally:
        shutil.rmtree(home, ignore_errors=True)
