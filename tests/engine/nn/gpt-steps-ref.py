#!/usr/bin/python3
"""gpt-steps-ref.py: PyTorch's side of test-gpt-steps.c: the same small
GPT (the spec in DIR/case.json, built from torch.nn modules by
nn-torch-ref.py's make(), the head tied to the token embedding), the same
initial weights (DIR/init.safetensors), the same token batches
(DIR/tokens.bin: steps x (N, L + 1) int64) and AdamW settings; writes the
loss of each step to DIR/losses.bin (f64). Exit 77 when torch is missing.

usage: gpt-steps-ref.py DIR
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

ref = importlib.machinery.SourceFileLoader("nn_torch_ref",
                                           os.path.join(HERE, "nn-torch-ref.py")).load_module()


def main():
    d = sys.argv[1]
    c = json.load(open(os.path.join(d, "case.json")))
    spec, opt = c["spec"], c["adamw"]
    state = safetensors_io.load(os.path.join(d, "init.safetensors"))
    steps, n, l1 = c["steps"], c["batch"], c["length"] + 1
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int64)
                              .reshape(steps, n, l1))
    mods, order = {}, []
    x0 = tokens[0][:, :-1]
    outs, prev = {"input": x0}, "input"
    for node in ref.expand(spec["nodes"]):  # build once, sized from a forward
        xs = [outs[i] for i in node.get("inputs", [prev])]
        m = ref.make(node, xs[0])
        pre = node["name"] + "."
        own = {k[len(pre):]: v.float() for k, v in state.items() if k.startswith(pre)}
        if "tie_weight" in node:
            missing = m.load_state_dict(own, strict=False).missing_keys
            assert missing == ["weight"], missing
            m.weight = mods[node["tie_weight"]].weight
        else:
            m.load_state_dict(own, strict=True)
        m.train(True)
        mods[node["name"]] = m
        order.append((node, m))
        with torch.no_grad():
            outs[node["name"]] = m(xs[0])
        prev = node["name"]
    params, seen = [], set()
    for _, m in order:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    o = torch.optim.AdamW(params, lr=opt["lr"], betas=tuple(opt["betas"]), eps=opt["eps"],
                          weight_decay=opt["weight_decay"])
    losses = []
    for s in range(steps):
        x, y = tokens[s][:, :-1], tokens[s][:, 1:]
        h = x
        for _, m in order:
            h = m(h)
        loss = F.cross_entropy(h.reshape(-1, h.shape[-1]), y.reshape(-1))
        o.zero_grad()
        loss.backward()
        o.step()
        losses.append(loss.item())
    np.array(losses, dtype=np.float64).tofile(os.path.join(d, "losses.bin"))


if __name__ == "__main__":
    main()
