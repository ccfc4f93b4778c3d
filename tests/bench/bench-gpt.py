#!/usr/bin/python3
"""bench-gpt.py: a small GPT in Ember and in PyTorch 1.13 side by side, in
one run on the same cores: training tokens/s (forward, cross-entropy over
every position, backward, AdamW; random token batches) and generation
tokens/s (greedy, one sequence, a 16-token prompt, with a KV cache: Ember's
em_decoder, and a PyTorch loop over the same modules with its own cache),
peak RSS of each (its own process), medians of interleaved rounds.

The model (char-gpt's shape): vocabulary 96, width 128, 4 heads, 4 pre-norm
causal GELU encoder layers (feed-forward 512), a final LayerNorm and a head
tied to the token embedding, sequences of 128, batch 16. PyTorch runs with
1 and 2 intra-op threads (its best is quoted).

usage: /usr/bin/python3 tests/bench/bench-gpt.py [--build build] [--rounds 3] [--steps 10]
                                                 [--gen 100]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

V, D, H, LAYERS, FF, L, B = 96, 128, 4, 4, 512, 128, 16

SPEC = {
    "name": "bench-gpt", "input": {"shape": [L], "dtype": "i64"},
    "nodes": [
        {"name": "tok", "type": "Embedding", "num_embeddings": V, "embedding_dim": D,
         "init_std": 0.02},
        {"name": "pos", "type": "PositionalEmbedding", "max_len": L, "init_std": 0.02},
        {"name": "layers", "repeat": LAYERS, "nodes": [
            {"name": "b", "type": "TransformerEncoderLayer", "nhead": H, "dim_feedforward": FF,
             "dropout": 0.0, "activation": "gelu", "norm_first": True, "causal": True}]},
        {"name": "ln", "type": "LayerNorm"},
        {"name": "head", "type": "Linear", "out_features": V, "bias": False,
         "tie_weight": "tok"}]}


def torch_side(threads, steps, gen):
    """The PyTorch model, its training and generation; prints one JSON line."""
    import resource
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, D)
            self.pos = nn.Parameter(torch.randn(L, D) * 0.02)
            self.layers = nn.ModuleList([nn.TransformerEncoderLayer(
                D, H, FF, 0.0, activation="gelu", batch_first=True, norm_first=True)
                for _ in range(LAYERS)])
            self.ln = nn.LayerNorm(D)
            self.head = nn.Linear(D, V, bias=False)
            self.head.weight = self.tok.weight
            self.register_buffer("mask", torch.triu(torch.full((L, L), float("-inf")), 1))

        def forward(self, x):
            h = self.tok(x) + self.pos[: x.shape[1]]
            for layer in self.layers:
                h = layer(h, src_mask=self.mask[: x.shape[1], : x.shape[1]])
            return self.head(self.ln(h))

        def step(self, x, pos, cache):
            """Logits of the new positions x (1, T) with cached keys and values."""
            h = self.tok(x) + self.pos[pos: pos + x.shape[1]]
            T = x.shape[1]
            for i, layer in enumerate(self.layers):
                a = layer.self_attn
                q, k, v = F.linear(layer.norm1(h), a.in_proj_weight, a.in_proj_bias).chunk(3, -1)
                sh = lambda t: t.view(1, T, H, D // H).transpose(1, 2)  # noqa: E731
                q, k, v = sh(q), sh(k), sh(v)
                if cache[i] is not None:
                    k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
                cache[i] = (k, v)
                s = q @ k.transpose(-1, -2) / math.sqrt(D // H)
                if T > 1:
                    s = s + torch.triu(torch.full((T, T), float("-inf")), 1)
                o = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, T, D)
                h = h + a.out_proj(o)
                h = h + layer.linear2(F.gelu(layer.linear1(layer.norm2(h))))
            return self.head(self.ln(h))

    m = GPT()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(3)
    times = []
    for s in range(steps + 2):
        x = torch.randint(0, V, (B, L), generator=g)
        y = (x + 1) % V
        t0 = time.perf_counter()
        loss = F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s >= 2:
            times.append(time.perf_counter() - t0)
    train = B * L / statistics.median(times)
    with torch.inference_mode():
        cache = [None] * LAYERS
        prompt = torch.arange(16).reshape(1, 16) % V
        nxt = m.step(prompt, 0, cache)[0, -1].argmax().reshape(1, 1)
        t0, made, pos = time.perf_counter(), 0, 16
        while pos < min(L, 16 + gen):
            nxt = m.step(nxt, pos, cache)[0, -1].argmax().reshape(1, 1)
            pos += 1
            made += 1
        rate = made / (time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"train_tokens_per_sec": train, "gen_tokens_per_sec": rate,
                      "peak_rss_mb": rss, "threads": threads}))


def child_rss(args, env=None):
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    out, err = p.communicate()
    if p.returncode:
        raise SystemExit("%s failed: %s" % (" ".join(args[:2]), err))
    return json.loads(out.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-child":
        torch_side(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--gen", type=int, default=100)
    a = ap.parse_args()
    exe = os.path.join(a.build, "tests", "bench", "bench-gpt")
    tmp = tempfile.mkdtemp(prefix="ember-bench-gpt-")
    spec = os.path.join(tmp, "gpt.json")
    with open(spec, "w") as f:
        json.dump(SPEC, f)
    res = {"ember": [], "torch-1thread": [], "torch-2threads": []}
    for r in range(a.rounds):
        res["ember"].append(child_rss([exe, spec, str(B), str(a.steps), str(a.gen), "2"]))
        for t, name in ((1, "torch-1thread"), (2, "torch-2threads")):
            res[name].append(child_rss([sys.executable, __file__, "--torch-child", str(t),
                                        str(a.steps), str(a.gen)]))
        print("round %d: %s" % (r + 1, ", ".join(
            "%s train %.0f tok/s gen %.0f tok/s" % (k, v[-1]["train_tokens_per_sec"],
                                                    v[-1]["gen_tokens_per_sec"])
            for k, v in res.items())), flush=True)
    med = {k: {f: statistics.median(x[f] for x in v)
               for f in ("train_tokens_per_sec", "gen_tokens_per_sec", "peak_rss_mb")}
           for k, v in res.items()}
    print("GPT V=%d D=%d H=%d layers=%d ff=%d L=%d batch=%d; ember kernels %s; medians of %d "
          "rounds:" % (V, D, H, LAYERS, FF, L, B, res["ember"][0]["cpu_kernels"], a.rounds))
    for k, v in med.items():
        print("  %-15s train %8.0f tokens/s   generate %6.0f tokens/s   peak RSS %5.0f MiB" %
              (k, v["train_tokens_per_sec"], v["gen_tokens_per_sec"], v["peak_rss_mb"]))
    best = max(("torch-1thread", "torch-2threads"), key=lambda k: med[k]["train_tokens_per_sec"])
    bestg = max(("torch-1thread", "torch-2threads"), key=lambda k: med[k]["gen_tokens_per_sec"])
    print("ember / torch best (%s) training: %.2fx; generation (%s): %.2fx; peak RSS "
          "ember / torch: %.2f" % (
              best, med["ember"]["train_tokens_per_sec"] / med[best]["train_tokens_per_sec"],
              bestg, med["ember"]["gen_tokens_per_sec"] / med[bestg]["gen_tokens_per_sec"],
              med["ember"]["peak_rss_mb"] / med[best]["peak_rss_mb"]))


if __name__ == "__main__":
    main()
