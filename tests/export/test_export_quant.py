"""test_export_quant.py: int8 quantisation end to end.

1. Accuracy: train fmnist-mlp for one epoch (`ember train --save`), then
   `ember eval` with and without `--quantize int8` on the full 10k test
   set: the drop must be under 1 point.
2. Export: `ember export --quantize int8`; onnx's checker (full_check)
   passes, the metadata says int8, the weights are int8 values (stored
   as uint8 + 128 with a zero point of 128).
   The graph is run by a small numpy interpreter of exactly the operators
   it uses, written here from the ONNX spec (opset 17), on 256 real test
   images, and compared with the engine's quantised outputs
   (export-forward ... int8): the same numbers (max abs diff <= 1e-5).
   OpenCV 4.6's DNN is tried too; it cannot import MatMulInteger, which
   is reported, not failed.
3. Linear over (N, L, D) inputs (rows = N L), with and without bias:
   the interpreter gives the engine's numbers.
4. The registry form: `ember export NAME@ALIAS --quantize int8` records a
   second export artifact (NAME-vV-int8.onnx).

usage: test_export_quant.py EMBER EXPORT_FORWARD SOURCE_ROOT
"""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper

# The float test's helpers: the same process runner, the same real test
# images, the same engine reference outputs.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_export import FORWARD, EMBER, SOURCE, N, HAVE_DATA, run, images, data_args, \
    engine_outputs  # noqa: E402

SPEC = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")


# ---- a numpy interpreter of the operators the export uses (ONNX opset 17) ----

def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


NP_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.UINT8: np.uint8,
            onnx.TensorProto.INT8: np.int8, onnx.TensorProto.INT32: np.int32}


def run_graph(model, x, strict=True):
    """Evaluates the graph on x, each operator as the spec defines it.
    strict: an overflow or invalid operation, or a Cast of a value out of
    range, fails the test; else they give what IEEE gives (a NaN cast to an
    integer type becomes 0, as the engine's clamps have it)."""
    env = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    env[model.graph.input[0].name] = x
    for node in model.graph.node:
        a = attrs(node)
        i = [env[n] for n in node.input if n]  # "" is an optional input left out
        t = node.op_type
        if t == "Flatten":  # axis 1: (N, rest)
            assert a.get("axis", 1) == 1
            y = i[0].reshape(i[0].shape[0], -1)
        elif t in ("ReduceMin", "ReduceMax"):  # axes attribute (opset 13-17)
            f = np.min if t == "ReduceMin" else np.max
            y = f(i[0], axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
        elif t in ("Min", "Max"):  # elementwise, broadcasting
            y = (np.minimum if t == "Min" else np.maximum)(i[0], i[1])
        elif t == "ReduceSum":  # axes input (opset 13-17)
            y = np.sum(i[0], axis=tuple(int(v) for v in i[1]),
                       keepdims=bool(a.get("keepdims", 1)), dtype=i[0].dtype)
        elif t in ("Add", "Sub", "Mul", "Div"):
            op = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[t]
            errs = "raise" if strict else "ignore"
            with np.errstate(over=errs, invalid=errs, divide=errs):
                y = op(i[0], i[1])
            assert y.dtype == i[0].dtype == i[1].dtype, (t, i[0].dtype, i[1].dtype)
        elif t == "Neg":
            y = np.negative(i[0])
        elif t == "Round":  # half to even, like np.rint
            y = np.rint(i[0])
        elif t == "Clip":  # min and max are scalar inputs (opset 13)
            y = np.minimum(np.maximum(i[0], i[1]), i[2])
        elif t == "Cast":
            to = NP_TYPES[a["to"]]
            if np.issubdtype(to, np.integer) and i[0].dtype.kind == "f" and not strict:
                i[0] = np.nan_to_num(i[0], nan=0.0)
            if np.issubdtype(to, np.integer) and i[0].dtype.kind == "f":
                info = np.iinfo(to)  # the values must already be in range
                assert i[0].min() >= info.min and i[0].max() <= info.max, node.name
                assert np.all(i[0] == np.trunc(i[0])), node.name
            y = i[0].astype(to)
        elif t == "MatMulInteger":  # int32 sums of (a - a_zero) (b - b_zero), zeros default 0
            a_zero = env[node.input[2]] if len(node.input) > 2 and node.input[2] else 0
            b_zero = env[node.input[3]] if len(node.input) > 3 and node.input[3] else 0
            assert np.ndim(a_zero) == 0 and np.ndim(b_zero) <= 1, node.name
            assert i[0].dtype == np.uint8 and i[1].dtype in (np.uint8, np.int8)
            y = ((i[0].astype(np.int64) - np.int64(a_zero))
                 @ (i[1].astype(np.int64) - np.asarray(b_zero, np.int64)))
            assert np.abs(y).max() < 2**31
            y = y.astype(np.int32)
        elif t == "Relu":
            y = np.maximum(i[0], np.float32(0))
        elif t == "Gemm":  # transB=1
            assert a.get("transB", 0) == 1
            y = i[0] @ i[1].T + (i[2] if len(i) > 2 else 0)
        else:
            raise AssertionError("the interpreter lacks %s" % t)
        env[node.output[0]] = y
    return env[model.graph.output[0].name]


def check_accuracy(w, tmp):
    data = data_args()
    ev = json.loads(run([EMBER, "eval", SPEC, "--weights", w, "--threads", "2"] + data)
                    .stdout.strip().splitlines()[-1])
    p = run([EMBER, "eval", SPEC, "--weights", w, "--threads", "2", "--quantize", "int8"] + data)
    q = json.loads(p.stdout.strip().splitlines()[-1])
    assert q["quantization"] == "int8" and ev["quantization"] == "none", (q, ev)
    assert "3 Linear layers quantised" in p.stderr, p.stderr
    drop = 100 * (ev["test_accuracy"] - q["test_accuracy"])
    print("accuracy f32 %.2f%%, int8 %.2f%% (drop %.2f points)" % (
        100 * ev["test_accuracy"], 100 * q["test_accuracy"], drop))
    assert ev["test_accuracy"] > 0.8 or not HAVE_DATA, ev
    assert drop < 1.0, "int8 loses %.2f points of accuracy" % drop
    assert q["test_accuracy"] != ev["test_accuracy"] or q["test_loss"] != ev["test_loss"], \
        "--quantize changed nothing"
    p = run([EMBER, "eval", SPEC, "--weights", w, "--quantize", "int4"], ok=False)
    assert p.returncode == 2 and "int8" in p.stderr, p.stderr


def check_export(w, tmp):
    out = os.path.join(tmp, "q.onnx")
    p = run([EMBER, "export", SPEC, "--weights", w, "-o", out, "--quantize", "int8"])
    assert "(int8)" in p.stdout, p.stdout
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    meta = {e.key: e.value for e in model.metadata_props}
    assert meta.get("quantization", "").startswith("int8-dynamic"), meta
    init = {t.name: t for t in model.graph.initializer}
    for layer in ("fc1", "fc2", "fc3"):
        # int8 weights stored as uint8 + 128 with a zero point of 128 (U8U8):
        # onnxruntime's U8S8 kernel saturates on AVX2 without VNNI
        # (engine/export/onnx-quant.c, test_export_ort.py)
        t = init[layer + ".weight_uint8"]
        assert t.data_type == onnx.TensorProto.UINT8, t.data_type
        z = onnx.numpy_helper.to_array(init[layer + ".weight_zero_point"])
        assert z.dtype == np.uint8 and z.shape == () and int(z) == 128, z
        assert layer + ".weight" not in init, "the f32 weights were exported too"
    ops = sorted({n.op_type for n in model.graph.node})
    assert "MatMulInteger" in ops and "Gemm" not in ops, ops
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    odims = inferred.graph.output[0].type.tensor_type.shape.dim
    assert odims[0].dim_param == "batch" and odims[1].dim_value == 10, odims

    x = images((1, 28, 28))
    ref = engine_outputs(SPEC, w, x, tmp, quant=True)
    f32 = engine_outputs(SPEC, w, x, tmp)
    got = run_graph(model, x)
    diff = float(np.abs(ref - got).max())
    exact = int((ref == got).sum())
    print("int8 export: %d images, max |engine - ONNX graph| %.3g (%d/%d identical), "
          "|int8 - f32| max %.3g, ops %s" % (N, diff, exact, ref.size,
                                             float(np.abs(ref - f32).max()), ",".join(ops)))
    assert diff <= 1e-5, "the exported graph differs from the engine by %g" % diff
    assert float(np.abs(ref - f32).max()) > 0, "the engine's int8 outputs equal f32"
    for b in (1, 7):  # batch independence holds in the graph too
        d = float(np.abs(run_graph(model, x[:b]) - ref[:b]).max())
        assert d <= 1e-5, "batch %d differs by %g" % (b, d)
    # The float export of the same weights still has the f32 Gemms.
    p = run([EMBER, "export", SPEC, "--weights", w, "-o", os.path.join(tmp, "f.onnx")])
    fm = onnx.load(os.path.join(tmp, "f.onnx"))
    assert "quantization" not in {e.key for e in fm.metadata_props}
    assert float(np.abs(run_graph(fm, x) - f32).max()) <= 1e-4
    try:  # a real consumer, when it can
        import cv2
        net = cv2.dnn.readNetFromONNX(out)
        net.setInput(np.ascontiguousarray(x))
        d = float(np.abs(net.forward().reshape(N, -1) - ref).max())
        print("OpenCV %s runs the int8 export: max diff %.3g" % (cv2.__version__, d))
        assert d <= 1e-4, d
    except cv2.error as e:
        msg = " ".join(str(e).split())
        print("OpenCV %s cannot run the int8 export: %s" % (cv2.__version__, msg[-200:]))


def check_extreme_rows(w, tmp, model):
    """Rows at the edge of f32: one spanning +-2e38 (its range overflowed
    f32 and it was quantised as zeros), one of 3e38 everywhere (fc1's
    output overflows: fc2 gets infinities), one with an infinity and one
    with a NaN: the engine's int8 answers are NaN where a row is not
    finite, the graph gives the same, and the span row is as f32 has it."""
    x = images((1, 28, 28))[:5].copy()
    flat = x.reshape(5, -1)
    flat[0, :] = 0
    flat[0, 0], flat[0, 1] = 2e38, -2e38
    flat[1, :] = 3e38
    flat[2, 5] = np.inf
    flat[3, 9] = np.nan
    ref = engine_outputs(SPEC, w, x, tmp, quant=True)
    f32 = engine_outputs(SPEC, w, x, tmp)
    got = run_graph(model, x, strict=False)
    assert np.array_equal(np.isnan(ref), np.isnan(got)), (ref, got)
    assert np.isnan(ref[1:4]).all(), ref[1:4]
    fin = np.isfinite(ref)
    assert np.abs(ref[fin] - got[fin]).max() <= 1e-5 * np.abs(ref[fin]).max()
    assert np.isfinite(ref[4]).all() and np.isfinite(ref[0]).all(), ref
    assert ref[0].argmax() == f32[0].argmax(), (ref[0], f32[0])
    print("int8 on rows at the edge of f32: NaN where f32 overflows or the row is not finite, "
          "the graph the same")


SEQ_SPEC = """{"name": "qseq", "input": {"shape": [5, 30]}, "nodes": [
  {"name": "fc1", "type": "Linear", "out_features": 20}, {"name": "act", "type": "ReLU"},
  {"name": "fc2", "type": "Linear", "out_features": 7, "bias": false},
  {"name": "flat", "type": "Flatten"}, {"name": "fc3", "type": "Linear", "out_features": 10}]}"""


def check_sequence(tmp):
    spec, w = os.path.join(tmp, "seq.json"), os.path.join(tmp, "seq.safetensors")
    out, xin, yout = (os.path.join(tmp, n) for n in ("seq.onnx", "xs.raw", "ys.raw"))
    with open(spec, "w") as f:
        f.write(SEQ_SPEC)
    x = np.random.default_rng(1).standard_normal((9, 5, 30)).astype("<f4")
    x.tofile(xin)
    run([FORWARD, spec, "init:" + w, len(x), xin, yout, "int8"])
    ref = np.fromfile(yout, dtype="<f4").reshape(len(x), -1)
    run([EMBER, "export", spec, "--weights", w, "--quantize", "int8", "-o", out])
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    diff = float(np.abs(run_graph(model, x) - ref).max())
    print("int8 export of Linear over (N, L, D): max diff %.3g" % diff)
    assert diff <= 1e-5, diff


def check_registry(tmp):
    home = os.path.join(tmp, "home")
    env = dict(os.environ, EMBER_HOME=home)
    env.pop("XDG_DATA_HOME", None)
    data = data_args()
    run([EMBER, "train", SPEC, "--epochs", "1", "--limit", "256", "--threads", "2"] + data,
        env=env)
    run([EMBER, "model", "register", "latest", "--name", "fq"], env=env)
    outside = os.path.join(tmp, "fq-int8.onnx")
    p = run([EMBER, "export", "fq@1", "--quantize", "int8", "-o", outside], env=env)
    inside = os.path.join(home, "artifacts", "exports", "fq-v1-int8.onnx")
    assert inside in p.stdout and os.path.exists(inside) and os.path.exists(outside), p.stdout
    assert open(inside, "rb").read() == open(outside, "rb").read()
    model = onnx.load(inside)
    onnx.checker.check_model(model, full_check=True)
    meta = {e.key: e.value for e in model.metadata_props}
    assert meta.get("registry_model") == "fq" and "quantization" in meta, meta
    show = json.loads(run([EMBER, "run", "show", "latest", "--json"], env=env).stdout)
    assert any(a["kind"] == "export" and a["path"] == inside for a in show["artifacts"]), show
    print("registry: int8 export recorded at %s" % inside)


def main():
    with tempfile.TemporaryDirectory(prefix="ember-export-quant-") as tmp:
        w = os.path.join(tmp, "mlp.safetensors")
        data = data_args()
        run([EMBER, "train", SPEC, "--epochs", "1", "--save", w, "--no-record",
             "--threads", "2"] + data, env=dict(os.environ, EMBER_HOME=os.path.join(tmp, "h0")))
        check_accuracy(w, tmp)
        check_export(w, tmp)
        out = os.path.join(tmp, "edge.onnx")
        run([EMBER, "export", SPEC, "--weights", w, "-o", out, "--quantize", "int8"])
        check_extreme_rows(w, tmp, onnx.load(out))
        check_sequence(tmp)
        check_registry(tmp)
    print("ok")


if __name__ == "__main__":
    main()
