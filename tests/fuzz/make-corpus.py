#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/):
a few small valid and near-valid files per parser, a few KiB in all. Run it
from anywhere (`/usr/bin/python3 tests/fuzz/make-corpus.py`); it rewrites the
folders beside it. A crashing input found later is added by hand to its
target's folder (README.md, "Fuzzing"): this script leaves other files be."""
import gzip
import json
import os
import struct
import zlib

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def gz(data):  # mtime 0: the same bytes on every run
    return gzip.compress(data, mtime=0)


# ---- safetensors: 8-byte LE header length, JSON header, data ----
def safetensors(tensors, meta=None, pad=True):
    header, blob = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("safetensors", "two-f32", safetensors(
    [("w", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "F32", [2], f32(0.5, -0.5))],
    {"format": "pt", "step": "3"}))
put("safetensors", "dtypes", safetensors(
    [("i", "I64", [2], struct.pack("<2q", -1, 7)), ("u", "U8", [3], b"\x00\x7f\xff"),
     ("d", "F64", [1], struct.pack("<d", 1.5)), ("n", "I32", [], struct.pack("<i", 5)),
     ("h", "BF16", [2], b"\x80\x3f\x00\x40")]))
put("safetensors", "empty-shape", safetensors([("z", "F32", [0, 3], b"")]))
put("safetensors", "no-tensors", safetensors([], {"note": "only metadata"}, pad=False))
good = safetensors([("w", "F32", [2], f32(1, 2))])
put("safetensors", "truncated", good[:-3])
overlap = (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
           b'"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}')
put("safetensors", "overlap", struct.pack("<Q", len(overlap)) + overlap + f32(1))

# ---- spec JSON ----
for name in ("fmnist-mlp", "fmnist-cnn"):
    src = os.path.join(HERE, "..", "..", "..", "data", "models", name + ".json")
    with open(src, "rb") as f:
        put("spec", name + ".json", f.read())
put("spec", "residual.json", json.dumps({
    "name": "res", "input": {"shape": [16]},
    "nodes": [
        {"name": "fc1", "type": "Linear", "out_features": 32},
        {"name": "act1", "type": "GELU"},
        {"name": "fc2", "type": "Linear", "out_features": 32},
        {"name": "res1", "type": "Add", "inputs": ["fc1", "fc2"]},
        {"name": "norm", "type": "LayerNorm"},
        {"name": "skip", "type": "Linear", "out_features": 32, "bias": False,
         "inputs": ["input"]},
        {"name": "res2", "type": "Add", "inputs": ["norm", "skip", "fc1"]},
        {"name": "head", "type": "Linear", "in_features": 32, "out_features": 4}]}))
put("spec", "embedding.json", json.dumps({
    "name": "emb", "input": {"shape": [6], "dtype": "i64"},
    "nodes": [{"name": "e", "type": "Embedding", "num_embeddings": 50, "embedding_dim": 8},
              {"name": "f", "type": "Flatten"},
              {"name": "bn", "type": "Dropout", "p": 0.1},
              {"name": "o", "type": "Linear", "out_features": 3}],
    "loss": {"type": "cross_entropy"}}))
put("spec", "bad-shape.json", '{"name": "x", "input": {"shape": [1, 4, 4]}, "nodes": '
    '[{"name": "c", "type": "Conv2d", "out_channels": 2, "kernel_size": 9}]}')

# ---- IDX, plain and gzip ----
def idx(code, dims, values):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + values


images = idx(8, [2, 3, 3], bytes(range(18)))
labels = idx(8, [4], bytes([0, 1, 9, 3]))
put("idx", "images", images)
put("idx", "labels", labels)
put("idx", "images.gz", gz(images))
put("idx", "labels.gz", gz(labels))
put("idx", "four-dims", idx(8, [1, 2, 1, 2], b"\x01\x02\x03\x04"))
put("idx", "no-items", idx(8, [0, 28, 28], b""))
put("idx", "float-type", idx(0x0d, [1], struct.pack(">f", 1.0)))
put("idx", "truncated.gz", gz(images)[:-6])
put("idx", "two-members.gz", gz(labels) + gz(b"\x00"))

# ---- CSV ----
put("csv", "labelled.csv", "1.5,2,0\n-3e2,4.25,1\n\n0,0,2\n7,8,1\n9,1,0\n2,2,1\n")
put("csv", "header.csv", "a,b,label\r\n1,2,3\r\n4,5,6\r\n")
put("csv", "semicolon.csv", "x;y\n 1 ; 2\n\t3;4\n")
put("csv", "ragged.csv", "1,2,3\n4,5\n")
put("csv", "bad-value.csv", "1,2,0\n1,nan,1\n1,x,1\n1,2,-1\n1,2,3.0\n1,2,1e999\n")

# ---- PNG, made with zlib ----
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xffffffff)


def png(w, h, depth, ctype, rows, interlace=0, extra=b""):
    # rows: each scanline (of each Adam7 pass when interlaced), filter 0
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0,
                                                              interlace)) +
            extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


put("png", "grey8.png", png(3, 2, 8, 0, [b"\x00\x80\xff", b"\x10\x20\x30"]))
put("png", "rgb8.png", png(2, 2, 8, 2, [b"\xff\x00\x00\x00\xff\x00", b"\x00\x00\xff\x80\x80\x80"]))
put("png", "rgba16.png", png(1, 1, 16, 6, [b"\x12\x34\x56\x78\x9a\xbc\xde\xf0"]))
put("png", "palette2.png", png(4, 1, 2, 3, [b"\x1b"],
                               extra=chunk(b"PLTE", b"\x00\x00\x00\xff\xff\xff\x80\x00\x00\x00\x80\x00") +
                               chunk(b"tRNS", b"\xff\x80")))
put("png", "grey-alpha-interlaced.png", png(2, 2, 8, 4, [b"\x00\xff", b"\xff\x80", b"\x40\x00\x80\xff"],
                                            interlace=1))
put("png", "bad-crc.png", png(1, 1, 8, 0, [b"\x00"])[:-5] + b"\x00\x00\x00\x01")

# ---- HTTP request heads and bodies (what the serve guard judges) ----
put("http-head", "get", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
put("http-head", "post", "POST /v1/predict HTTP/1.1\r\nContent-Length: 12\r\n"
    "content-type: application/json\r\n\r\n{\"inputs\":1}")
put("http-head", "bad-length", "POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n")
put("http-head", "binary", b"\x00\x01\x02\xff\r\n")
put("http-head", "bare-lf", "\r\n\nGET / HTTP/1.0\nA: b\n\n")
put("http-head", "partial", "GET /slow HTTP/1.1\r\nHost: sl")
# a kept-alive stream: the guard judges every head on it, finding where each body ends
put("http-head", "pipeline", "POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    "POST /v2/models/m/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    "1;x=y\r\n{\r\n1\r\n}\r\n0\r\nT: 1\r\n\r\nGET /v2 HTTP/1.1\r\n\r\n\x00\x01")
put("http-head", "bad-chunk", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
