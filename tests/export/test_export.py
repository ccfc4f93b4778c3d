"""test_export.py: `ember export` checked by real ONNX consumers.

For each zoo model and a spec that uses every exportable layer kind:
train briefly (so batch-norm statistics are not the defaults), export,
check with onnx's checker (full_check: shape inference too), run the file
in OpenCV's DNN module on 256 real Fashion-MNIST test images (random
inputs when the dataset is absent) and compare with the engine's outputs
for the same images (export-forward): max abs diff <= 1e-4. The batch
dimension is dynamic (batch 1 and 7 run too). Then the registry form:
`ember export NAME@production` records an artifact of kind "export".

usage: test_export.py EMBER EXPORT_FORWARD SOURCE_ROOT
"""
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

import cv2
import numpy as np
import onnx
import onnx.numpy_helper

EMBER, FORWARD, SOURCE = sys.argv[1:4]
FMNIST = "/usr/share/datasets/fashion-mnist"
TEST_IMAGES = os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")
HAVE_DATA = os.path.exists(TEST_IMAGES)
TOL = 1e-4
N = 256


def run(args, env=None, ok=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                       timeout=300)
    if ok:
        assert p.returncode == 0, "%s failed (%d):\n%s%s" % (
            " ".join(map(str, args)), p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    return p


def images(shape):
    """N test images (N, 1, 28, 28) in [0, 1], read from the IDX gzip
    (random inputs of the spec's shape for other models)."""
    if not HAVE_DATA or list(shape) != [1, 28, 28]:
        return np.random.default_rng(7).random([N] + list(shape), dtype=np.float32)
    with gzip.open(TEST_IMAGES, "rb") as f:
        raw = f.read()
    magic, count, rows, cols = np.frombuffer(raw[:16], dtype=">u4")
    assert magic == 2051 and rows == 28 and cols == 28, "unexpected IDX header"
    px = np.frombuffer(raw[16:16 + N * 28 * 28], dtype=np.uint8)
    return (px.reshape(N, 1, 28, 28).astype(np.float32) / 255.0)


def data_args():
    return [] if HAVE_DATA else ["--dataset", "synthetic"]


def engine_outputs(spec, weights, x, tmp, quant=False):
    """The engine's outputs (N, K) for x, with int8 Linear layers when
    quant (export-forward ... int8)."""
    xin, yout = os.path.join(tmp, "x.raw"), os.path.join(tmp, "y.raw")
    np.ascontiguousarray(x, dtype="<f4").tofile(xin)
    run([FORWARD, spec, weights, len(x), xin, yout] + (["int8"] if quant else []))
    return np.fromfile(yout, dtype="<f4").reshape(len(x), -1)


def opencv_outputs(path, x):
    net = cv2.dnn.readNetFromONNX(path)
    net.setInput(np.ascontiguousarray(x))
    return net.forward().reshape(len(x), -1)


def check_model(spec, tmp):
    name = os.path.splitext(os.path.basename(spec))[0]
    w, out = os.path.join(tmp, name + ".safetensors"), os.path.join(tmp, name + ".onnx")
    # A short training so the weights (and batch-norm statistics) moved.
    run([EMBER, "train", spec, "--epochs", "1", "--limit", "512", "--batch", "64",
         "--no-record", "--save", w, "--threads", "2"] + data_args())
    p = run([EMBER, "export", spec, "--weights", w, "-o", out])
    assert out in p.stdout, p.stdout

    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17, model.opset_import
    meta = {e.key: e.value for e in model.metadata_props}
    assert meta["model_name"] == json.load(open(spec))["name"], meta
    assert "ember_version" in meta, meta
    shape = json.load(open(spec))["input"]["shape"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == shape, dims
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    odims = inferred.graph.output[0].type.tensor_type.shape.dim
    assert odims[0].dim_param == "batch" and odims[1].dim_value == 10, odims
    ops = sorted({n.op_type for n in model.graph.node})
    seq = sequence_layers(json.load(open(spec)))
    if seq:
        print("%s: checker and shape inference pass; not run in OpenCV 4.6, whose importer "
              "cannot broadcast over the dynamic batch nor multiply 4-D tensors (%s): "
              "export-ort runs it in ONNX Runtime" % (name, ", ".join(sorted(seq))))
        return out

    x = images(shape)
    ref = engine_outputs(spec, w, x, tmp)
    got = opencv_outputs(out, x)
    diff = float(np.abs(ref - got).max())
    assert diff <= TOL, "%s: OpenCV differs from the engine by %g" % (name, diff)
    assert float(np.abs(ref).max()) > 1e-3, "%s: outputs are all near zero" % name
    for b in (1, 7):  # the dynamic batch
        got_b = opencv_outputs(out, x[:b])
        d = float(np.abs(ref[:b] - got_b).max())
        assert d <= TOL, "%s: batch %d differs by %g" % (name, b, d)
    print("%s: %d images, max abs diff %.3g, ops %s" % (name, N, diff, ",".join(ops)))
    return out


SEQUENCE_TYPES = {"PositionalEmbedding", "MultiheadAttention", "TransformerEncoderLayer",
                  "ToSequence", "ClassToken", "SequencePool"}


def sequence_layers(spec):
    """The attention-era layer types a spec uses (inside repeated blocks too)."""
    types = set()
    for node in spec["nodes"]:
        for n in node.get("nodes", [node]):
            if n.get("type") in SEQUENCE_TYPES:
                types.add(n["type"])
    return types


def check_embedding(tmp):
    """Index input (Gather). OpenCV 4.6 gathers only constant indices, so
    this one is checked by the checker and by recomputing the graph's few
    ops in numpy from the file's own initializers."""
    spec = os.path.join(SOURCE, "tests", "export", "embedding.json")
    w, out = os.path.join(tmp, "emb.safetensors"), os.path.join(tmp, "emb.onnx")
    x = np.random.default_rng(3).integers(0, 20, (N, 6)).astype("<i8")
    xin, yout = os.path.join(tmp, "xi.raw"), os.path.join(tmp, "yi.raw")
    x.tofile(xin)
    run([FORWARD, spec, "init:" + w, N, xin, yout])
    ref = np.fromfile(yout, dtype="<f4").reshape(N, -1)
    run([EMBER, "export", spec, "--weights", w, "-o", out])
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [n.op_type for n in model.graph.node] == ["Gather", "Flatten", "Gemm"], model.graph.node
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    y = init["emb.weight"][x].reshape(N, -1) @ init["fc.weight"].T + init["fc.bias"]
    diff = float(np.abs(ref - y).max())
    assert diff <= TOL, "embedding: differs by %g" % diff
    print("export-embedding: max abs diff %.3g (numpy over the file's initializers)" % diff)


def check_refusals(tmp):
    spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
    p = run([EMBER, "export", spec, "-o", os.path.join(tmp, "x.onnx")], ok=False)
    assert p.returncode == 2 and "--weights" in p.stderr, p.stderr
    p = run([EMBER, "export", spec, "--weights", os.path.join(tmp, "missing.safetensors"),
             "-o", os.path.join(tmp, "x.onnx")], ok=False)
    assert p.returncode != 0 and "missing.safetensors" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(tmp, "x.onnx"))
    # -o onto something a rename would replace: a pipe is refused and left as it is;
    # a symlink is written through (the file it names), and stays a link
    w = os.path.join(tmp, "fmnist-mlp.safetensors")
    fifo = os.path.join(tmp, "pipe.onnx")
    os.mkfifo(fifo)
    p = run([EMBER, "export", spec, "--weights", w, "-o", fifo], ok=False)
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr  # as train --save
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    link, target = os.path.join(tmp, "link.onnx"), os.path.join(tmp, "target.onnx")
    os.symlink("target.onnx", link)
    run([EMBER, "export", spec, "--weights", w, "-o", link])
    assert os.path.islink(link) and os.path.isfile(target)
    onnx.checker.check_model(onnx.load(target), full_check=True)
    # int8 covers Linear layers: a model without one is refused, not labelled int8
    conv = os.path.join(tmp, "convonly.json")
    with open(conv, "w") as f:
        json.dump({"name": "convonly", "input": {"shape": [1, 4, 4]},
                   "nodes": [{"name": "c", "type": "Conv2d", "out_channels": 2,
                              "kernel_size": 3}, {"name": "f", "type": "Flatten"}]}, f)
    cw = os.path.join(tmp, "convonly.safetensors")
    run([EMBER, "train", conv, "--epochs", "0", "--save", cw, "--dataset", "synthetic"])
    p = run([EMBER, "export", conv, "--weights", cw, "-o", os.path.join(tmp, "c8.onnx"),
             "--quantize", "int8"], ok=False)
    assert p.returncode == 2 and "no Linear layer" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(tmp, "c8.onnx"))
    # and so do eval and predict (they ran f32 and labelled the result int8)
    rows = os.path.join(tmp, "rows16.csv")
    with open(rows, "w") as f:
        f.write(",".join(["0.5"] * 16) + "\n")
    for cmd in (["eval", conv, "--weights", cw, "--dataset", "synthetic"],
                ["predict", conv, "--weights", cw, rows]):
        p = run([EMBER, *cmd, "--quantize", "int8"], ok=False)
        assert p.returncode == 2 and "no Linear layer" in p.stderr, (cmd, p.stderr)


def check_registry(tmp):
    home = os.path.join(tmp, "home")
    env = dict(os.environ, EMBER_HOME=home)
    env.pop("XDG_DATA_HOME", None)
    spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
    run([EMBER, "train", spec, "--epochs", "1", "--limit", "256", "--threads", "2"]
        + data_args(), env=env)
    run([EMBER, "model", "register", "latest", "--name", "fmnist"], env=env)
    run([EMBER, "model", "promote", "fmnist", "1", "--alias", "production"], env=env)
    p = run([EMBER, "export", "fmnist@nosuch"], env=env, ok=False)
    assert p.returncode == 1 and "'nosuch'" in p.stderr, p.stderr

    p = run([EMBER, "export", "fmnist@production"], env=env)
    inside = os.path.join(home, "artifacts", "exports", "fmnist-v1.onnx")
    assert inside in p.stdout and os.path.exists(inside), p.stdout
    outside = os.path.join(tmp, "deploy.onnx")
    p = run([EMBER, "export", "fmnist@1", "-o", outside], env=env)
    assert os.path.exists(outside) and inside in p.stdout, p.stdout
    assert open(outside, "rb").read() == open(inside, "rb").read()

    model = onnx.load(outside)
    onnx.checker.check_model(model, full_check=True)
    meta = {e.key: e.value for e in model.metadata_props}
    show = json.loads(run([EMBER, "run", "show", "latest", "--json"], env=env).stdout)
    run_id = show["id"] if "id" in show else show["run"]["id"]
    assert meta.get("registry_model") == "fmnist" and meta.get("registry_version") == "1", meta
    assert meta.get("registry_run") == str(run_id), (meta, run_id)
    assert model.model_version == 1
    exports = [a for a in show["artifacts"] if a["kind"] == "export"]
    assert len(exports) >= 1, show["artifacts"]
    assert any(a["path"] == inside for a in exports), exports
    print("registry: export recorded as artifact(s) %s" % [a.get("id") for a in exports])


def main():
    with tempfile.TemporaryDirectory(prefix="ember-export-") as tmp:
        # the image classifiers of the zoo; its language models (char-gpt:
        # token input, a tied head, per-position logits) take text data and are
        # checked through tests/export/sequence.json, which has each of those
        zoo = sorted(z for z in glob.glob(os.path.join(SOURCE, "data", "models", "*.json"))
                     if json.load(open(z)).get("training", {}).get("dataset") != "text")
        assert len(zoo) >= 2, zoo
        for spec in zoo + [os.path.join(SOURCE, "tests", "export", "mixed.json")]:
            check_model(spec, tmp)
        check_embedding(tmp)
        check_refusals(tmp)
        check_registry(tmp)
    print("ok")


if __name__ == "__main__":
    main()
