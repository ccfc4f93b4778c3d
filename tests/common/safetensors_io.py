"""safetensors_io.py: the safetensors format in plain Python + torch.

Debian has no `safetensors` package, so the parity tests exchange weights
with PyTorch through this module:

    save(path, {"fc.weight": t, ...}, metadata={"epoch": "3"})
    tensors = load(path)            # dict of torch tensors, file order
    tensors, meta = load(path, with_metadata=True)

A file is an 8-byte little-endian header length N, N bytes of JSON
(name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an
optional "__metadata__" map of strings), then the raw little-endian data,
packed without holes. load() checks the layout as strictly as the C
reader does.
"""

import json
import os
import struct
import sys
import tempfile

import torch

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}

_MAX_HEADER = 100 << 20

if sys.byteorder != "little":
    raise ImportError("safetensors_io assumes a little-endian host")


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def save(path, tensors, metadata=None):
    """Writes tensors (a dict name -> torch.Tensor) atomically to path."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata keys and values must be strings")
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    for name, t in tensors.items():
        if name == "__metadata__":
            raise ValueError("a tensor may not be named '__metadata__'")
        if t.dtype not in _NAMES:
            raise TypeError("tensor %r: dtype %s has no safetensors name" % (name, t.dtype))
        data = _tensor_bytes(t)
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for b in blobs:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class FormatError(ValueError):
    pass


def load(path, with_metadata=False):
    """Reads a safetensors file into a dict name -> torch.Tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise FormatError("%s: truncated (%d bytes)" % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if n < 2 or n > _MAX_HEADER or 8 + n > len(raw):
        raise FormatError("%s: bad header length %d for a %d-byte file" % (path, n, len(raw)))

    def no_duplicates(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise FormatError("%s: duplicate key %r in the header" % (path, k))
            d[k] = v
        return d

    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError("%s: the header is not valid JSON (%s)" % (path, e))
    if not isinstance(header, dict):
        raise FormatError("%s: the header is not a JSON object" % path)
    data = raw[8 + n :]
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise FormatError("%s: __metadata__ must map strings to strings" % path)
    entries = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise FormatError("%s: bad entry for tensor %r" % (path, name))
        if e["dtype"] not in _DTYPES:
            raise FormatError("%s: tensor %r has unknown dtype %r" % (path, name, e["dtype"]))
        shape, (b, end) = e["shape"], e["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in shape) or not 0 <= b <= end:
            raise FormatError("%s: tensor %r has a bad shape or offsets" % (path, name))
        dt = _DTYPES[e["dtype"]]
        numel = 1
        for d in shape:
            numel *= d
        if end - b != numel * torch.empty((), dtype=dt).element_size():
            raise FormatError("%s: tensor %r: offsets disagree with dtype and shape" % (path, name))
        entries.append((b, end, name, dt, shape))
    entries.sort()
    pos = 0
    for b, end, name, _, _ in entries:
        if b != pos:
            raise FormatError("%s: tensor %r: data overlaps or leaves a hole" % (path, name))
        pos = end
    if pos != len(data):
        raise FormatError("%s: the data is %d bytes, the header describes %d" % (path, len(data), pos))
    out = {}
    for b, end, name, dt, shape in entries:
        if end == b:
            out[name] = torch.empty(shape, dtype=dt)
        else:
            out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=dt).reshape(shape)
    if with_metadata:
        return out, dict(meta)
    return out
