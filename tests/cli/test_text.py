"""A language model from the command line: `ember train` on a text file
(the text kind, the spec's tokenizer, per-token loss, accuracy and
perplexity in the JSON line), the zoo's char-gpt spec, `ember generate`
(greedy decoding continues a learnt text past the context; seeded
sampling repeats), and bad input, each with a clear message and a
non-zero exit.

usage: test_text.py EMBER SOURCE_ROOT
"""
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

EMBER = SOURCE = None
FORTUNES = "/usr/share/games/fortunes"


def run(*args):
    p = subprocess.run([EMBER] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode >= 0, "ember crashed with signal %d: %s" % (-p.returncode, p.stderr[-2000:])
    assert "Sanitizer" not in p.stderr, p.stderr[-4000:]
    return p


def tiny_spec(tokenizer, vocab_size, context=32):
    return {
        "name": "tiny-lm", "input": {"shape": [context], "dtype": "i64"},
        "tokenizer": tokenizer,
        "nodes": [
            {"name": "tok", "type": "Embedding", "num_embeddings": vocab_size,
             "embedding_dim": 32},
            {"name": "pos", "type": "PositionalEmbedding", "max_len": 64},
            {"name": "b", "type": "TransformerEncoderLayer", "nhead": 2, "dim_feedforward": 64,
             "dropout": 0.0, "norm_first": True, "causal": True},
            {"name": "ln", "type": "LayerNorm"},
            {"name": "head", "type": "Linear", "out_features": vocab_size,
             "tie_weight": "tok", "bias": False}],
        "training": {"dataset": "text", "optimizer": "adamw", "lr": 0.01, "batch_size": 16}}


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-text-")
        os.environ["EMBER_HOME"] = os.path.join(self.tmp, "home")
        rng = random.Random(1)
        words = "the cat sat on a mat and the dog ran to the tree by the sea".split()
        self.text = "".join(rng.choice(words) + (" " if rng.random() < 0.9 else "\n")
                            for _ in range(3000))
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.data)
        self.txt = self.write("data/t.txt", self.text)
        self.vocab = "".join(sorted(set(self.text)))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w" if isinstance(text, str) else "wb") as f:
            f.write(text)
        return path

    def spec(self, name, spec):
        return self.write(name, json.dumps(spec))

    def fails(self, args, *needles, code=None):
        p = run(*args)
        self.assertNotEqual(p.returncode, 0, "expected failure for %s" % (args,))
        if code is not None:
            self.assertEqual(p.returncode, code, p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertTrue(p.stderr.startswith("ember: ") or "\nember: " in p.stderr, p.stderr)
        return p


class Train(Base):
    def test_char_model_trains(self):
        spec = self.spec("c.json", tiny_spec({"type": "char", "vocab": self.vocab},
                                             len(self.vocab)))
        w = os.path.join(self.tmp, "w.safetensors")
        p = run("train", spec, "--data-dir", self.txt, "--epochs", 2, "--no-record",
                "--save", w, "--threads", 1)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        # a text of a few words: well under log(V) after two short epochs
        self.assertLess(r["test_loss"], 0.8 * math.log(len(self.vocab)), r)
        self.assertAlmostEqual(r["test_perplexity"], math.exp(r["test_loss"]),
                               delta=1e-4 * r["test_perplexity"])
        self.assertAlmostEqual(r["train_tokens_per_sec"], 32 * r["train_samples_per_sec"],
                               delta=1e-3 * r["train_tokens_per_sec"])
        self.assertTrue(0 <= r["test_accuracy"] <= 1, r)
        # eval reads the same validation split with the saved weights
        e = run("eval", spec, "--weights", w, "--data-dir", self.txt)
        self.assertEqual(e.returncode, 0, e.stderr)
        self.assertAlmostEqual(json.loads(e.stdout)["test_loss"], r["test_loss"], places=4)

    def test_recorded_with_its_files(self):
        spec = self.spec("b.json", tiny_spec({"type": "byte"}, 256))
        p = run("train", spec, "--data-dir", self.data, "--epochs", 1, "--threads", 1)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("not recorded", p.stderr)
        show = run("run", "show", "latest", "--json")
        self.assertEqual(show.returncode, 0, show.stderr)
        ds = json.loads(show.stdout)["dataset"]
        self.assertEqual(ds["name"], "text")
        self.assertEqual(ds["size"], len(self.text.encode()))  # its one file, once

    def test_zoo_char_gpt(self):
        p = run("info", "char-gpt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("tokenizer: char, 113 characters", p.stdout)
        self.assertIn("[N, 128, 113]", p.stdout)
        if os.path.isdir(FORTUNES):  # a few batches of the real text
            t = run("train", "char-gpt", "--epochs", 1, "--limit", 64, "--no-record",
                    "--schedule", "constant", "--threads", 2)
            self.assertEqual(t.returncode, 0, t.stderr)
            r = json.loads(t.stdout.strip().splitlines()[-1])
            self.assertLess(r["test_loss"], math.log(113), r)


class Generate(Base):
    def trained(self, tokenizer, vocab_size, text=None, epochs=2):
        """A tiny model trained on text (self.text by default): spec, weights."""
        txt = self.write("data/g.txt", text) if text is not None else self.txt
        spec = self.spec("g.json", tiny_spec(tokenizer, vocab_size))
        w = os.path.join(self.tmp, "g.safetensors")
        p = run("train", spec, "--data-dir", txt, "--epochs", epochs, "--no-record", "--save", w,
                "--threads", 1)
        self.assertEqual(p.returncode, 0, p.stderr)
        return spec, w

    def test_greedy_continues_the_text(self):
        # a text that is its own next-character rule: greedy decoding must
        # continue it, past the context of 32 (the decoder starts again
        # from the last 16 tokens). Its period, 7, is prime to the
        # windows' 32, so that the windows start at every phase and the
        # model learns the characters, not their positions.
        spec, w = self.trained({"type": "byte"}, 256, "abcdef\n" * 2300, epochs=4)
        p = run("generate", spec, "--weights", w, "--prompt", "abc", "--tokens", 61,
                "--temperature", 0)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, ("abcdef\n" * 10)[:64] + "\n")
        self.assertIn("61 tokens in", p.stderr)

    def test_sampling_is_seeded(self):
        spec, w = self.trained({"type": "char", "vocab": self.vocab}, len(self.vocab))
        args = ["generate", spec, "--weights", w, "--prompt", "the cat", "--tokens", 80,
                "--temperature", 0.8, "--top-k", 10, "--top-p", 0.95]
        a, b = run(*args, "--seed", 7), run(*args, "--seed", 7)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(a.stdout, b.stdout)
        out = a.stdout[:-1]
        self.assertTrue(out.startswith("the cat"), out)
        self.assertEqual(len(out), len("the cat") + 80)  # one character a token
        self.assertTrue(set(out) <= set(self.vocab), out)
        g = run("generate", spec, "--weights", w, "--prompt", "a", "--tokens", 0)
        self.assertEqual((g.returncode, g.stdout), (0, "a\n"), g.stderr)

    def test_bad_input(self):
        spec, w = self.trained({"type": "char", "vocab": self.vocab}, len(self.vocab), epochs=1)
        self.fails(["generate", spec, "--weights", w, "--prompt", "the Zoo"],
                   "--prompt:1:5: U+005A 'Z' is not in the char tokenizer's vocabulary", code=2)
        self.fails(["generate", spec, "--weights", w, "--prompt", ""], "--prompt is empty",
                   code=2)
        self.fails(["generate", spec, "--weights", w], "give --prompt", code=2)
        self.fails(["generate", spec, "--prompt", "a"], "needs --weights", code=2)
        self.fails(["generate", spec, "--weights", w, "--prompt", "a", "--top-p", "2"],
                   "--top-p", code=2)
        mlp = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        mw = os.path.join(self.tmp, "mlp.safetensors")
        self.assertEqual(run("train", mlp, "--epochs", 0, "--save", mw).returncode, 0)
        self.fails(["generate", mlp, "--weights", mw, "--prompt", "a"], "has no tokenizer",
                   code=2)


class BadInput(Base):
    def test_missing_folder(self):
        spec = self.spec("b.json", tiny_spec({"type": "byte"}, 256))
        self.fails(["train", spec, "--data-dir", "/nonexistent/ember-text", "--no-record"],
                   "/nonexistent/ember-text")

    def test_no_data_dir(self):
        spec = self.spec("b.json", tiny_spec({"type": "byte"}, 256))
        self.fails(["train", spec, "--no-record"], "the text dataset needs its folder",
                   "--data-dir")

    def test_empty_file(self):
        spec = self.spec("b.json", tiny_spec({"type": "byte"}, 256))
        self.fails(["train", spec, "--data-dir", self.write("e.txt", ""), "--no-record"],
                   "e.txt' is empty")

    def test_not_text_for_char(self):
        spec = self.spec("c.json", tiny_spec({"type": "char", "vocab": self.vocab},
                                             len(self.vocab)))
        head = self.text[:100]
        bad = self.write("bin.txt", head.encode() + b"\xff\xfe" + b"a" * 200)
        line, col = head.count("\n") + 1, len(head) - head.rfind("\n")  # of the 0xff
        self.fails(["train", spec, "--data-dir", bad, "--no-record"],
                   "bin.txt:%d:%d: byte 0xff is not UTF-8" % (line, col))
        other = self.write("x.txt", self.text[:500] + "Z" + self.text[500:])
        self.fails(["train", spec, "--data-dir", other, "--no-record"],
                   "U+005A 'Z' is not in the char tokenizer's vocabulary")

    def test_vocab_missing(self):
        spec = self.spec("c.json", tiny_spec({"type": "char"}, len(self.vocab)))
        p = self.fails(["train", spec, "--data-dir", self.txt, "--no-record"],
                       "the char tokenizer has no \"vocab\"")
        self.assertIn(json.dumps(self.vocab), p.stderr)

    def test_no_tokenizer(self):
        s = tiny_spec({"type": "byte"}, 256)
        del s["tokenizer"]
        self.fails(["train", self.spec("n.json", s), "--data-dir", self.txt, "--no-record"],
                   "add \"tokenizer\"")

    def test_context_too_long(self):
        s = tiny_spec({"type": "byte"}, 256, context=64)
        short = self.write("s.txt", "abcdefgh" * 40)  # 32 bytes of validation
        self.fails(["train", self.spec("l.json", s), "--data-dir", short, "--no-record"],
                   "validation split", "needs 65")


if __name__ == "__main__":
    EMBER, SOURCE = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.environ["EMBER_SOURCE_ROOT"] = SOURCE
    unittest.main(argv=[sys.argv[0], "-v"])
