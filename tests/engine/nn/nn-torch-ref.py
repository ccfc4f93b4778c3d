#!/usr/bin/python3
"""nn-torch-ref.py: PyTorch reference for Ember's model specs.

Usage: nn-torch-ref.py DIR...

Each DIR holds a case.json written by test-nn-torch.c:
  {"spec": {...Ember spec...}, "training": bool, "dtype": "f32" | "f64",
   "input": {"file", "dtype", "shape"},
   "tensors": [{"name", "dtype", "shape", "file"}, ...],   # state dict
   "grad_out": {"file", "dtype", "shape"} (optional)}
The spec is rebuilt here from torch.nn modules, node by node, with
in_features and friends taken from the actual inputs (so this is also an
independent check of Ember's shape inference). The script writes, into
DIR: out.bin (the output), state-<i>.bin (every state-dict tensor after
the forward, e.g. updated running statistics) and, when grad_out is
given, grad-<i>.bin (d sum(out * grad_out) / d tensor i, for parameters)
and grad-input.bin; and result.json with the output's shape.

Exit status 77 when torch cannot be imported (the tests then skip).
"""
import json
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError:
    sys.exit(77)

NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64}


def load(d, e):
    a = np.fromfile(os.path.join(d, e["file"]), dtype=NP[e["dtype"]])
    return torch.from_numpy(a.reshape(e["shape"]))


def save(d, name, t):
    t.detach().contiguous().numpy().tofile(os.path.join(d, name))


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


def causal_mask(n, dtype):
    """PyTorch's float mask for a causal block: -inf above the diagonal."""
    return torch.triu(torch.full((n, n), float("-inf"), dtype=dtype), 1)


class SelfAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention as a one-input layer (query = key = value)."""
    def __init__(self, d, heads, dropout, bias, causal):
        super().__init__(d, heads, dropout=dropout, bias=bias, batch_first=True)
        self.causal = causal

    def forward(self, x):
        mask = causal_mask(x.shape[1], x.dtype) if self.causal else None
        return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]


class EncoderLayer(nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer with Ember's causal flag."""
    def __init__(self, causal, **kw):
        super().__init__(batch_first=True, **kw)
        self.causal = causal

    def forward(self, x):
        mask = causal_mask(x.shape[1], x.dtype) if self.causal else None
        return super().forward(x, src_mask=mask)


class PositionalEmbedding(nn.Module):
    """x + weight[:L], weight (max_len, D): nn.Embedding over arange(L)."""
    def __init__(self, max_len, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class ToSequence(nn.Module):
    def forward(self, x):
        return x.flatten(2).transpose(1, 2)


class ClassToken(nn.Module):
    """torchvision's ViT class token, first in the sequence."""
    def __init__(self, d):
        super().__init__()
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, x):
        return torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)


class SequencePool(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return x.mean(1) if self.mode == "mean" else x[:, 0]


def make(node, x):
    """A torch module for one Ember node, sized from its input x."""
    t, a = node["type"], node
    if t == "Linear":
        return nn.Linear(x.shape[-1], a["out_features"], bias=a.get("bias", True))
    if t == "Conv2d":
        return nn.Conv2d(x.shape[1], a["out_channels"], pair(a["kernel_size"]),
                         stride=pair(a.get("stride", 1)), padding=pair(a.get("padding", 0)),
                         dilation=pair(a.get("dilation", 1)), groups=a.get("groups", 1),
                         bias=a.get("bias", True))
    if t == "BatchNorm2d":
        return nn.BatchNorm2d(x.shape[1], eps=a.get("eps", 1e-5), momentum=a.get("momentum", 0.1))
    if t == "LayerNorm":
        ns = a.get("normalized_shape", [x.shape[-1]])
        return nn.LayerNorm([ns] if isinstance(ns, int) else ns, eps=a.get("eps", 1e-5))
    if t == "Dropout":
        return nn.Dropout(a.get("p", 0.5))
    if t == "GELU":
        return nn.GELU(approximate=a.get("approximate", "none"))
    if t in ("ReLU", "SiLU", "Sigmoid", "Tanh"):
        return getattr(nn, t)()
    if t in ("MaxPool2d", "AvgPool2d"):
        k = pair(a["kernel_size"])
        return getattr(nn, t)(k, stride=pair(a["stride"]) if "stride" in a else k,
                              padding=pair(a.get("padding", 0)))
    if t == "Flatten":
        return nn.Flatten(a.get("start_dim", 1), a.get("end_dim", -1))
    if t == "Embedding":
        return nn.Embedding(a["num_embeddings"], a["embedding_dim"])
    if t == "MultiheadAttention":
        return SelfAttention(x.shape[-1], a["num_heads"], a.get("dropout", 0.0),
                             a.get("bias", True), a.get("causal", False))
    if t == "TransformerEncoderLayer":
        return EncoderLayer(a.get("causal", False), d_model=x.shape[-1], nhead=a["nhead"],
                            dim_feedforward=a.get("dim_feedforward", 2048),
                            dropout=a.get("dropout", 0.1),
                            activation=a.get("activation", "relu"),
                            layer_norm_eps=a.get("layer_norm_eps", 1e-5),
                            norm_first=a.get("norm_first", False))
    if t == "PositionalEmbedding":
        return PositionalEmbedding(a["max_len"], x.shape[-1])
    if t == "ToSequence":
        return ToSequence()
    if t == "ClassToken":
        return ClassToken(x.shape[-1])
    if t == "SequencePool":
        return SequencePool(a.get("mode", "first"))
    if t == "Add":
        return None
    raise ValueError("no reference for layer type " + t)


def expand(nodes):
    """Repeated blocks written out, named as Ember's spec-repeat.c names
    them (an independent reading of the README's rule)."""
    out, last = [], {}
    for node in nodes:
        if "repeat" not in node:
            n = dict(node)
            if "inputs" in n:
                n["inputs"] = [last.get(i, i) for i in n["inputs"]]
            out.append(n)
            continue
        inner, b = node["nodes"], node["name"]
        names = {n["name"] for n in inner}
        for r in range(node["repeat"]):
            def named(nm):
                return "%s.%d" % (b, r) if len(inner) == 1 else "%s.%d.%s" % (b, r, nm)
            for n in inner:
                c = dict(n, name=named(n["name"]))
                if "inputs" in c:
                    c["inputs"] = [named(i) if i in names else i for i in c["inputs"]]
                out.append(c)
        last[b] = out[-1]["name"]
    return out


def owner(mods, name):
    """(module, parameter name) of a state-dict entry: the longest node name
    that prefixes it (node names may hold dots: layers.0)."""
    node = max((n for n in mods if name.startswith(n + ".")), key=len)
    return mods[node], name[len(node) + 1:]


def run(d):
    with open(os.path.join(d, "case.json")) as f:
        c = json.load(f)
    spec, dtype = c["spec"], torch.float64 if c["dtype"] == "f64" else torch.float32
    x = load(d, c["input"])
    if x.is_floating_point():
        x.requires_grad_(True)
    tensors = [(e["name"], load(d, e)) for e in c["tensors"]]
    outs, mods, prev = {"input": x}, {}, "input"
    for node in expand(spec["nodes"]):
        xs = [outs[i] for i in node.get("inputs", [prev])]
        m = make(node, xs[0])
        if m is None:
            y = xs[0]
            for other in xs[1:]:
                y = y + other
        else:
            m = m.to(dtype)
            pre = node["name"] + "."
            own = {n[len(pre):]: v for n, v in tensors if n.startswith(pre)}
            if "tie_weight" in node:  # head.weight = tok.weight: one Parameter
                missing = m.load_state_dict(own, strict=False).missing_keys
                assert missing == ["weight"], missing
                m.weight = mods[node["tie_weight"]].weight
            else:
                m.load_state_dict(own, strict=True)
            m.train(c["training"])
            mods[node["name"]] = m
            y = m(xs[0])
        outs[node["name"]] = y
        prev = node["name"]
    out = outs[spec["output"]] if "output" in spec else y
    save(d, "out.bin", out)
    for i, (name, _) in enumerate(tensors):
        mod, pname = owner(mods, name)
        save(d, "state-%d.bin" % i, mod.state_dict()[pname])
    if "grad_out" in c:
        (out * load(d, c["grad_out"])).sum().backward()
        for i, (name, _) in enumerate(tensors):
            mod, pname = owner(mods, name)
            p = dict(mod.named_parameters()).get(pname)
            if p is not None and p.grad is not None:
                save(d, "grad-%d.bin" % i, p.grad)
        if x.grad is not None:
            save(d, "grad-input.bin", x.grad)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump({"output_shape": list(out.shape)}, f)


def main():
    torch.manual_seed(0)
    for d in sys.argv[1:]:
        run(d)


if __name__ == "__main__":
    main()
