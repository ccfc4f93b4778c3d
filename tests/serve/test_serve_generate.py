"""Text from a served language model (POST /v2/models/NAME/generate): a
tiny causal model trained on a repeating text, served from its spec and
weights; greedy decoding (temperature 0) and a seeded sample give the
same text as `ember generate` with the same settings (one em_generate
behind both); the server lists the extension; refusals: no text_input, a
character outside the tokenizer's vocabulary, max_tokens past 4096, GET,
and a model without a tokenizer.

usage: test_serve_generate.py EMBER SOURCE_ROOT
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import test_serve  # noqa: E402  (its Server)

EMBER = SOURCE = None


def run(*args):
    p = subprocess.run([EMBER, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "ember %s: %s" % (" ".join(map(str, args)), p.stderr)
    return p.stdout


class GenerateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ember-generate-")
        rng = random.Random(1)
        words = "the cat sat on a mat and the dog ran to the tree by the sea".split()
        text = "".join(rng.choice(words) + " " for _ in range(2000))
        os.mkdir(os.path.join(cls.tmp, "data"))
        with open(os.path.join(cls.tmp, "data", "t.txt"), "w") as f:
            f.write(text)
        vocab = "".join(sorted(set(text)))
        spec = {"name": "tiny-lm", "input": {"shape": [32], "dtype": "i64"},
                "tokenizer": {"type": "char", "vocab": vocab},
                "nodes": [
                    {"name": "tok", "type": "Embedding", "num_embeddings": len(vocab),
                     "embedding_dim": 32},
                    {"name": "pos", "type": "PositionalEmbedding", "max_len": 64},
                    {"name": "b", "type": "TransformerEncoderLayer", "nhead": 2,
                     "dim_feedforward": 64, "dropout": 0.0, "norm_first": True, "causal": True},
                    {"name": "ln", "type": "LayerNorm"},
                    {"name": "head", "type": "Linear", "out_features": len(vocab),
                     "tie_weight": "tok", "bias": False}],
                "training": {"dataset": "text", "data_dir": os.path.join(cls.tmp, "data"),
                             "optimizer": "adamw", "lr": 0.01, "batch_size": 16}}
        cls.spec = os.path.join(cls.tmp, "lm.json")
        with open(cls.spec, "w") as f:
            json.dump(spec, f)
        cls.weights = os.path.join(cls.tmp, "lm.safetensors")
        run("train", cls.spec, "--epochs", "2", "--no-record", "--quiet", "--threads", "1",
            "--save", cls.weights)
        cls.srv = test_serve.Server(dict(os.environ), cls.spec, "--weights", cls.weights,
                                    "--workers", "1", "--threads", "1")

    @classmethod
    def tearDownClass(cls):
        rc, err = cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, err

    def generate(self, body, path="/v2/models/tiny-lm/generate"):
        return self.srv.request("POST", path, json.dumps(body).encode(),
                                {"Content-Type": "application/json"})

    def cli(self, prompt, tokens, *extra):
        out = run("generate", self.spec, "--weights", self.weights, "--prompt", prompt,
                  "--tokens", tokens, "--threads", "1", *extra)
        self.assertTrue(out.startswith(prompt) and out.endswith("\n"), out)
        return out[len(prompt):-1]

    def test_same_as_the_cli(self):
        st, r = self.generate({"id": "g1", "text_input": "the cat ",
                               "parameters": {"max_tokens": 40, "temperature": 0}})
        self.assertEqual(st, 200, r)
        self.assertEqual((r["model_name"], r["id"], r["tokens"]), ("tiny-lm", "g1", 40))
        self.assertEqual(r["text_output"], self.cli("the cat ", 40, "--temperature", "0"))
        body = {"text_input": "a dog", "parameters": {"max_tokens": 30, "temperature": 0.8,
                                                      "top_k": 5, "seed": 7}}
        st, a = self.generate(body)
        st2, b = self.generate(body)
        self.assertEqual((st, st2), (200, 200))
        self.assertEqual(a["text_output"], b["text_output"])  # a seed repeats a sample
        self.assertEqual(a["text_output"], self.cli("a dog", 30, "--temperature", "0.8",
                                                    "--top-k", "5", "--seed", "7"))
        st, meta = self.srv.request("GET", "/v2")
        self.assertIn("generate", meta["extensions"])
        st, r = self.generate({"text_input": "the", "parameters": {"max_tokens": 0}})
        self.assertEqual((st, r["text_output"], r["tokens"]), (200, "", 0))

    def test_refusals(self):
        cases = [({"parameters": {"max_tokens": 5}}, "text_input"),
                 ({"text_input": "the QUICK"}, "is not in the char tokenizer's vocabulary"),
                 ({"text_input": "the", "parameters": {"max_tokens": 5000}}, "max_tokens"),
                 ({"text_input": "the", "parameters": {"temperature": -1}}, "temperature"),
                 ({"text_input": ""}, "text_input is empty")]
        for body, msg in cases:
            st, r = self.generate(body)
            self.assertEqual(st, 400, (body, r))
            self.assertIn(msg, r["error"], body)
        st, _ = self.srv.request("GET", "/v2/models/tiny-lm/generate")
        self.assertEqual(st, 405)
        mlp = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        w = os.path.join(self.tmp, "mlp.safetensors")
        run("train", mlp, "--epochs", "0", "--no-record", "--save", w)
        srv = test_serve.Server(dict(os.environ), mlp, "--weights", w, "--workers", "1",
                                "--threads", "1")
        try:
            st, r = srv.request("POST", "/v2/models/fmnist-mlp/generate",
                                json.dumps({"text_input": "x"}).encode(),
                                {"Content-Type": "application/json"})
            self.assertEqual(st, 400)
            self.assertIn("has no tokenizer", r["error"])
        finally:
            rc, err = srv.stop()
            self.assertEqual(rc, 0, err)


if __name__ == "__main__":
    EMBER, SOURCE = sys.argv[1], sys.argv[2]
    test_serve.EMBER, test_serve.SOURCE = EMBER, SOURCE
    sys.argv[1:] = sys.argv[3:]
    unittest.main(verbosity=2)
