#!/usr/bin/python3
"""text-torch-ref.py: PyTorch's side of test-text-torch.c. Reads the text
files itself (DIR/case.json's "data": its files in name order, UTF-8),
checks that the spec's char vocabulary is the text's sorted character
set, tokenizes, holds out the last 10% of tokens, cuts windows of
"context" tokens (targets: the next tokens); builds the spec's small GPT
from torch.nn modules (nn-torch-ref.py's make()) with the weights of
DIR/init.safetensors; and writes DIR/val-x.bin, val-y.bin (int64: every
validation window and its targets), result.bin (f64: validation loss, the
mean cross-entropy over every position, token accuracy, the loss of the
first training batch of "batch" windows) and grad.bin (f32: that loss's
gradient of tok.weight). Exit 77 when torch is missing.

usage: text-torch-ref.py DIR
"""
import importlib.machinery
import json
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "common"))
import safetensors_io  # noqa: E402

ref = importlib.machinery.SourceFileLoader(
    "nn_torch_ref", os.path.join(HERE, "..", "nn", "nn-torch-ref.py")).load_module()


def windows(ids, L):
    n = (len(ids) - 1) // L
    x = torch.tensor([ids[i * L:i * L + L] for i in range(n)], dtype=torch.int64)
    y = torch.tensor([ids[i * L + 1:i * L + L + 1] for i in range(n)], dtype=torch.int64)
    return x, y


def build(spec, state, x0):
    order, mods, h = [], {}, x0
    for node in ref.expand(spec["nodes"]):
        m = ref.make(node, h)
        pre = node["name"] + "."
        own = {k[len(pre):]: v.float() for k, v in state.items() if k.startswith(pre)}
        if "tie_weight" in node:
            missing = m.load_state_dict(own, strict=False).missing_keys
            assert missing == ["weight"], missing
            m.weight = mods[node["tie_weight"]].weight
        else:
            m.load_state_dict(own, strict=True)
        m.train(False)
        mods[node["name"]] = m
        order.append(m)
        with torch.no_grad():
            h = m(h)
    return order, mods


def forward(order, x):
    h = x
    for m in order:
        h = m(h)
    return h


def main():
    d = sys.argv[1]
    c = json.load(open(os.path.join(d, "case.json")))
    spec, L, B = c["spec"], c["context"], c["batch"]
    text = "".join(open(os.path.join(c["data"], f), encoding="utf-8").read()
                   for f in sorted(os.listdir(c["data"])))
    vocab = spec["tokenizer"]["vocab"]
    assert "".join(sorted(set(text))) == vocab, (sorted(set(text)), vocab)
    index = {ch: i for i, ch in enumerate(vocab)}
    ids = [index[ch] for ch in text]
    n_val = len(ids) * 10 // 100
    train, val = ids[:len(ids) - n_val], ids[len(ids) - n_val:]
    vx, vy = windows(val, L)
    vx.numpy().tofile(os.path.join(d, "val-x.bin"))
    vy.numpy().tofile(os.path.join(d, "val-y.bin"))
    state = safetensors_io.load(os.path.join(d, "init.safetensors"))
    order, mods = build(spec, state, vx[:1])
    with torch.no_grad():
        logits = forward(order, vx)
        V = logits.shape[-1]
        val_loss = F.cross_entropy(logits.reshape(-1, V), vy.reshape(-1)).item()
        acc = (logits.argmax(-1) == vy).double().mean().item()
    tx, ty = windows(train, L)
    for m in order:
        m.train(True)  # as the trainer's batch (no dropout in this spec)
    logits = forward(order, tx[:B])
    loss = F.cross_entropy(logits.reshape(-1, V), ty[:B].reshape(-1))
    loss.backward()
    np.array([val_loss, acc, loss.item()], dtype=np.float64).tofile(os.path.join(d, "result.bin"))
    mods["tok"].weight.grad.numpy().astype(np.float32).tofile(os.path.join(d, "grad.bin"))


if __name__ == "__main__":
    main()
