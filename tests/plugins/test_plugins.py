"""test_plugins.py: the plugins of plugins/ through `ember`, as a person
uses them (run with Debian's /usr/bin/python3: torch, onnx, cv2).

- `ember plugins` lists the three good plugins and, given the folder of
  bad ones, refuses each with its reason while the good ones still load.
- The png-folder dataset (written here from Fashion-MNIST test images with
  cv2: 3 classes x 100 images, train/ and test/) trains a CNN with the
  SEBlock plugin layer end to end through `ember train`, well above chance,
  with the macro_f1 metric in the train JSON and in the registry; `ember
  eval --metric macro_f1` reports it too.
- png-folder errors: images of another size name the file.
- A spec naming a layer type no plugin provides says which folders were
  searched and which plugins were refused.
- SEBlock against PyTorch (forward, input and parameter gradients), and
  its ONNX form: onnx's checker and OpenCV's DNN module match the engine.

  test_plugins.py EMBER PLUGIN_FORWARD SOURCE_ROOT
"""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import cv2
import numpy as np
import onnx
import torch

EMBER, FORWARD, SOURCE = sys.argv[1:4]
sys.path.insert(0, os.path.join(SOURCE, "tests", "common"))
import safetensors_io  # noqa: E402

GOOD = os.environ["EMBER_PLUGIN_DIR"]
BAD = os.environ["EMBER_BAD_PLUGIN_DIR"]
FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = {0: "tshirt", 1: "trouser", 7: "sneaker"}  # label -> folder name


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(args, env, ok=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                       timeout=120)
    if ok and p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (args, p.returncode, p.stdout, p.stderr))
    assert p.returncode < 128 and "Sanitizer" not in p.stderr, p.stderr
    return p


def check_listing(env):
    p = run([EMBER, "plugins", "--json", "--plugin-dir", GOOD], env)
    j = json.loads(p.stdout)
    got = {e["name"]: e for e in j["plugins"]}
    assert set(got) == {"seblock", "png-folder", "macro-f1"}, got.keys()
    assert got["seblock"]["layers"] == ["SEBlock"], got["seblock"]
    assert got["png-folder"]["datasets"] == ["png-folder"], got["png-folder"]
    assert got["macro-f1"]["metrics"] == ["macro_f1"], got["macro-f1"]
    assert j["refused"] == [], j["refused"]
    # with the bad folder too (a global option, before the command): the bad
    # ones are refused with a reason, as warnings, and the good ones load
    p = run([EMBER, "--plugin-dir", BAD, "--plugin-dir", GOOD, "plugins", "--json"], env)
    j = json.loads(p.stdout)
    # (bad-late-add and bad-odd-onnx load: they misbehave only when the host test
    # calls them after init)
    assert {e["name"] for e in j["plugins"]} == {"seblock", "png-folder", "macro-f1",
                                                 "bad-late-add", "bad-odd-onnx"}, j
    reasons = {os.path.basename(e["path"]): e["reason"] for e in j["refused"]}
    assert "its version '1.0 beta' is not" in reasons["bad-version-space.so"], reasons
    assert "em_plugin_add_layer" in reasons["bad-direct-register.so"], reasons
    assert "is a run's own" in reasons["bad-reserved-metric.so"], reasons
    assert "built for plugin API version 99" in reasons["bad-version.so"], reasons
    assert "no ember_plugin_entry() function" in reasons["bad-no-entry.so"], reasons
    assert "init failed: deliberately failing" in reasons["bad-init.so"], reasons
    assert "'Linear' is already registered" in reasons["bad-duplicate.so"], reasons
    assert "bad-init.so refused" in p.stderr and "warning" not in p.stdout, p.stderr
    # a folder whose name is not UTF-8: its path and reason are still listed
    odd_dir = os.path.join(env["EMBER_HOME"], os.fsdecode(b"odd-\xff"))
    os.makedirs(odd_dir)
    with open(os.path.join(odd_dir, "x.so"), "w") as fh:
        fh.write("x")
    p = subprocess.run([EMBER, "--plugin-dir", odd_dir, "plugins", "--json"], env=env,
                       capture_output=True)  # stderr quotes the raw bytes: not text
    j = json.loads(p.stdout)
    assert "odd-\ufffd" in j["refused"][0]["path"] and j["refused"][0]["reason"], j
    shutil.rmtree(odd_dir)
    text = run([EMBER, "plugins", "--plugin-dir", GOOD], env).stdout
    assert "seblock 1.0" in text and "layers   SEBlock" in text, text
    # EMBER_PLUGIN_PATH and $EMBER_HOME/plugins load them too
    env2 = dict(env, EMBER_PLUGIN_PATH="/nonexistent:" + GOOD)
    assert "SEBlock" in run([EMBER, "plugins"], env2).stdout
    home_plugins = os.path.join(env["EMBER_HOME"], "plugins")
    os.makedirs(home_plugins)
    shutil.copy(os.path.join(GOOD, "ember-macro-f1.so"), home_plugins)
    j = json.loads(run([EMBER, "plugins", "--json"], env).stdout)
    assert [e["name"] for e in j["plugins"]] == ["macro-f1"], j
    default = [f for f in j["folders"] if f["origin"] == "default"]
    assert default == [{"path": home_plugins, "origin": "default", "exists": True}], j
    assert j["folders"][-1]["origin"] == "installed", j  # searched last
    shutil.rmtree(home_plugins)
    print("ember plugins: 3 loaded, 7 refused with their reasons")


def write_png_folder(root, per_class=100, n_test=20):
    x = np.frombuffer(gzip.open(FMNIST + "/t10k-images-idx3-ubyte.gz").read(), np.uint8,
                      offset=16).reshape(-1, 28, 28)
    y = np.frombuffer(gzip.open(FMNIST + "/t10k-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
    for label, name in CLASSES.items():
        idx = np.nonzero(y == label)[0][:per_class]
        for k, i in enumerate(idx):
            split = "test" if k >= per_class - n_test else "train"
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            img = x[i]
            if k % 10 == 3:  # some RGB files: converted to grey like the first image
                img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
            assert cv2.imwrite(os.path.join(root, split, name, "%05d.png" % i), img)


SE_SPEC = {
    "name": "se-cnn", "input": {"shape": [1, 28, 28]},
    "nodes": [
        {"name": "conv1", "type": "Conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1},
        {"name": "relu1", "type": "ReLU"},
        {"name": "pool1", "type": "MaxPool2d", "kernel_size": 2},
        {"name": "se", "type": "SEBlock", "reduction": 2},
        {"name": "flat", "type": "Flatten"},
        {"name": "fc", "type": "Linear", "out_features": 3}],
    "training": {"dataset": "png-folder", "epochs": 4, "batch_size": 16, "lr": 0.05,
                 "optimizer": "sgd", "momentum": 0.9, "metrics": ["macro_f1"]}}


def check_training(env, tmp):
    data = os.path.join(tmp, "png")
    write_png_folder(data)
    spec = os.path.join(tmp, "se-cnn.json")
    json.dump(SE_SPEC, open(spec, "w"))
    w = os.path.join(tmp, "se.safetensors")
    p = run([EMBER, "train", spec, "--plugin-dir", GOOD, "--data-dir", data, "--threads", "2",
             "--save", w, "--seed", "1"], env)
    j = json.loads(p.stdout.strip().splitlines()[-1])
    assert j["test_accuracy"] > 0.8, j  # chance is 1/3
    f1 = j["metrics"]["macro_f1"]
    assert 0.75 < f1 <= 1 and abs(f1 - j["test_accuracy"]) < 0.1, j
    assert "macro_f1 " in p.stderr, p.stderr  # on the eval progress lines
    # recorded in the registry as a metric of the run
    m = run([EMBER, "metrics", "latest", "macro_f1", "--json"], env)
    assert abs(json.loads(m.stdout)[-1]["value"] - f1) < 1e-6, m.stdout
    # a registered version opens without --plugin-dir too: its run's plugins load
    run([EMBER, "model", "register", str(j["run_id"]), "--name", "se-cnn"], env)
    onnx_out = os.path.join(tmp, "se-registered.onnx")
    x = run([EMBER, "export", "se-cnn@1", "-o", onnx_out], env)
    assert os.path.getsize(onnx_out) > 0, x.stderr
    assert "loaded from" in x.stderr and "as run %d recorded" % j["run_id"] in x.stderr, x.stderr
    # the run records its plugins; a stopped run resumes without --plugin-dir
    tags = [a for a in json.loads(run([EMBER, "run", "show", "latest", "--json"], env).stdout)
            ["annotations"] if a["kind"] == "tag" and a["key"].startswith("plugin.")]
    for t in tags:  # "<version> sha256:<hex> <file>": the file as it was trained with
        version, sha, path = t["text"].split(" ", 2)
        assert os.path.isabs(path) and sha == "sha256:" + sha256_of(path), t
    s = run([EMBER, "train", spec, "--plugin-dir", GOOD, "--data-dir", data, "--threads", "2",
             "--seed", "1", "--stop-after-steps", "3", "--quiet"], env)
    stopped = json.loads(s.stdout.strip().splitlines()[-1])
    assert stopped["stopped"] and stopped["steps"] == 3, stopped
    r = run([EMBER, "train", "--resume", str(stopped["run_id"]), "--quiet"], env)
    resumed = json.loads(r.stdout.strip().splitlines()[-1])
    assert "as run %d recorded" % stopped["run_id"] in r.stderr, r.stderr
    assert resumed["steps"] == j["steps"] and not resumed["stopped"], (resumed, j)
    assert "is not the file" not in r.stderr, r.stderr
    # a plugin file changed since the run was trained: the resume refuses it
    moved = os.path.join(tmp, "plugins-copy")
    os.makedirs(moved)
    for f in os.listdir(GOOD):
        if f.endswith(".so"):
            shutil.copy(os.path.join(GOOD, f), moved)
    s = run([EMBER, "train", spec, "--plugin-dir", moved, "--data-dir", data, "--threads", "2",
             "--seed", "1", "--stop-after-steps", "3", "--quiet"], env)
    stopped = json.loads(s.stdout.strip().splitlines()[-1])
    for f in os.listdir(moved):
        with open(os.path.join(moved, f), "ab") as fh:  # still loads: ELF ignores the tail
            fh.write(b"rebuilt")
    # not loaded from the tag: its bytes are not the ones recorded
    r = run([EMBER, "train", "--resume", str(stopped["run_id"]), "--quiet"], env, ok=False)
    assert r.returncode == 1 and "its SHA-256 is" in r.stderr, r.stderr
    assert "--plugin-dir" in r.stderr, r.stderr
    # given by the user, it loads, with a warning
    r = run([EMBER, "train", "--resume", str(stopped["run_id"]), "--quiet",
             "--plugin-dir", moved], env)
    changed = os.path.join(moved, "ember-seblock.so")
    assert "(%s) is not the file run %d was trained with" % (
        changed, stopped["run_id"]) in r.stderr, r.stderr
    # ember eval with --metric (the spec without "metrics")
    plain = dict(SE_SPEC, training=dict(SE_SPEC["training"]))
    del plain["training"]["metrics"]
    spec2 = os.path.join(tmp, "se-plain.json")
    json.dump(plain, open(spec2, "w"))
    e = run([EMBER, "eval", spec2, "--weights", w, "--plugin-dir", GOOD, "--data-dir", data,
             "--metric", "macro_f1"], env)
    ej = json.loads(e.stdout.strip().splitlines()[-1])
    assert abs(ej["test_accuracy"] - j["test_accuracy"]) < 1e-6, (ej, j)
    assert abs(ej["metrics"]["macro_f1"] - f1) < 1e-6, (ej, j)
    # a metric that fails (NaN) is left out with a warning; the rest is reported
    e = run([EMBER, "eval", spec2, "--weights", w, "--plugin-dir", GOOD, "--plugin-dir", BAD,
             "--data-dir", data, "--metric", "test_nan_metric", "--metric", "macro_f1"], env)
    ej = json.loads(e.stdout.strip().splitlines()[-1])
    assert "metric 'test_nan_metric' is left out of this evaluation" in e.stderr, e.stderr
    assert abs(ej["metrics"]["macro_f1"] - f1) < 1e-6 and "test_nan_metric" not in ej["metrics"], ej
    # without the plugins: the spec's layer type and metric are reported missing
    bad = run([EMBER, "train", spec, "--data-dir", data, "--no-record"], env, ok=False)
    assert bad.returncode != 0 and "unknown layer type 'SEBlock'" in bad.stderr, bad.stderr
    assert "plugin folders searched" in bad.stderr, bad.stderr
    bad = run([EMBER, "eval", spec2, "--weights", w, "--plugin-dir", GOOD, "--data-dir", data,
               "--metric", "top5"], env, ok=False)
    assert bad.returncode == 2 and "unknown metric 'top5'" in bad.stderr, bad.stderr
    print("png-folder + SEBlock: test accuracy %.3f, macro-F1 %.3f" % (j["test_accuracy"], f1))
    return data, spec, w


def check_png_errors(env, tmp, data):
    odd = os.path.join(tmp, "odd")
    shutil.copytree(data, odd)
    path = os.path.join(odd, "train", "trouser", "zz-big.png")
    cv2.imwrite(path, np.zeros((30, 28), np.uint8))
    p = run([EMBER, "train", os.path.join(tmp, "se-cnn.json"), "--plugin-dir", GOOD,
             "--data-dir", odd, "--no-record"], env, ok=False)
    assert p.returncode != 0 and path in p.stderr and "same size" in p.stderr, p.stderr
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    p = run([EMBER, "train", os.path.join(tmp, "se-cnn.json"), "--plugin-dir", GOOD,
             "--data-dir", empty, "--no-record"], env, ok=False)
    assert p.returncode != 0 and "no class sub-folders" in p.stderr, p.stderr
    assert "png-folder: png-folder" not in p.stderr, p.stderr  # said once
    # train/ without test/: said, not "train" taken for a class
    half = os.path.join(tmp, "half")
    shutil.copytree(os.path.join(data, "train"), os.path.join(half, "train"))
    p = run([EMBER, "train", os.path.join(tmp, "se-cnn.json"), "--plugin-dir", GOOD,
             "--data-dir", half, "--no-record"], env, ok=False)
    assert p.returncode != 0 and "held-out split needs both train/ and test/" in p.stderr, \
        p.stderr
    # colour images (no train/ and test/: both splits read the folder) give
    # (3, H, W) samples; sorted class names are the labels
    rgb = os.path.join(tmp, "rgb")
    rng = np.random.default_rng(0)
    for c, name in enumerate(["blue", "red"]):  # cv2 writes BGR
        os.makedirs(os.path.join(rgb, name))
        for i in range(6):
            img = (rng.random((8, 8, 3)) * 60).astype(np.uint8)
            img[:, :, 2 * c] += 180
            cv2.imwrite(os.path.join(rgb, name, "%d.png" % i), img)
    spec = os.path.join(tmp, "rgb.json")
    json.dump({"name": "rgb", "input": {"shape": [3, 8, 8]},
               "nodes": [{"name": "f", "type": "Flatten"},
                         {"name": "fc", "type": "Linear", "out_features": 2}],
               "training": {"dataset": "png-folder", "epochs": 10, "batch_size": 4,
                            "lr": 0.05}}, open(spec, "w"))
    p = run([EMBER, "train", spec, "--plugin-dir", GOOD, "--data-dir", rgb, "--no-record"], env)
    j = json.loads(p.stdout.strip().splitlines()[-1])
    assert j["test_accuracy"] == 1.0, j
    print("png-folder errors name the file; RGB folders give (3, H, W) samples")


def check_png_values(env, tmp):
    """png-folder samples are the values `ember predict` reads, not rounded to 8 bits
    (16-bit images, colour made grey: training saw byte-rounded values), and a test
    split of colour images is converted to the training split's grey (it took its own
    first image's channels, and neither model fit). Checked through `ember eval` of a
    random Linear model against PyTorch on the exact values."""
    rng = np.random.default_rng(3)
    root = os.path.join(tmp, "pvals")
    want = {}
    for split in ("train", "test"):
        xs, ys = [], []
        for c, name in enumerate(["a", "b"]):
            os.makedirs(os.path.join(root, split, name))
            for i in range(4):
                path = os.path.join(root, split, name, "%d.png" % i)
                if split == "train":  # 16-bit grey
                    img = rng.integers(0, 65536, (8, 8), dtype=np.uint16)
                    x = img.astype(np.float64) / 65535
                else:  # 8-bit colour (cv2: BGR), made grey as the README says
                    img = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                    b, g, r = (img[:, :, k].astype(np.float64) / 255 for k in range(3))
                    x = 0.299 * r + 0.587 * g + 0.114 * b
                assert cv2.imwrite(path, img)
                xs.append(x.astype(np.float32))
                ys.append(c)
        want[split] = (torch.tensor(np.stack(xs)).reshape(len(xs), -1), torch.tensor(ys))
    spec = os.path.join(tmp, "pvals.json")
    json.dump({"name": "pvals", "input": {"shape": [1, 8, 8]},
               "nodes": [{"name": "f", "type": "Flatten"},
                         {"name": "fc", "type": "Linear", "out_features": 2}],
               "training": {"dataset": "png-folder"}}, open(spec, "w"))
    w = os.path.join(tmp, "pvals.safetensors")
    run([EMBER, "train", spec, "--epochs", "0", "--save", w, "--no-record"], env)
    t = safetensors_io.load(w)
    t = {k: v.double() * 40 for k, v in t.items()}  # large weights: rounding shows
    safetensors_io.save(w, {k: v.float() for k, v in t.items()})
    for split, data in (("test", root), ("train", os.path.join(root, "train"))):
        # the train/ folder alone has no split: both splits read it
        p = run([EMBER, "eval", spec, "--weights", w, "--plugin-dir", GOOD, "--data-dir", data],
                env)
        got = json.loads(p.stdout.strip().splitlines()[-1])["test_loss"]
        x, y = want[split]
        ref = torch.nn.functional.cross_entropy(
            x.double() @ t["fc.weight"].T + t["fc.bias"], y).item()
        assert abs(got - ref) <= 1e-5 * max(1.0, abs(ref)), (split, got, ref)
    print("png-folder: 16-bit and colour-to-grey samples as predict reads them; a colour test "
          "split converted to the training split's grey")


def check_odd_dataset(env, tmp):
    """A plugin dataset whose test split is empty is refused before training (it was
    found after a whole epoch); one claiming 2^50 samples is refused by its length."""
    spec = os.path.join(tmp, "odd.json")
    json.dump({"name": "odd", "input": {"shape": [4]},
               "nodes": [{"name": "fc", "type": "Linear", "out_features": 2}],
               "training": {"dataset": "test-odd-data", "epochs": 1, "batch_size": 8,
                            "lr": 0.1}}, open(spec, "w"))
    for sub, why in (("plain", "the test split of the test-odd-data dataset is empty"),
                     ("huge", "length 1125899906842624 is more than Ember takes")):
        d = os.path.join(tmp, "odd-data", sub)
        os.makedirs(d)
        p = run([EMBER, "train", spec, "--plugin-dir", BAD, "--data-dir", d, "--no-record"],
                env, ok=False)
        assert p.returncode != 0 and why in p.stderr, p.stderr
        assert "step" not in p.stderr.split(why)[0], p.stderr  # before any training
    print("plugin datasets: an empty test split and an absurd length are refused first")


def check_unknown_type(env, tmp):
    spec = os.path.join(tmp, "glu.json")
    json.dump({"name": "g", "input": {"shape": [4]}, "nodes": [{"name": "g", "type": "GLU"}]},
              open(spec, "w"))
    p = run([EMBER, "info", spec, "--plugin-dir", GOOD, "--plugin-dir", BAD], env, ok=False)
    assert p.returncode != 0 and "unknown layer type 'GLU'" in p.stderr, p.stderr
    assert "no loaded plugin provides it" in p.stderr and GOOD in p.stderr, p.stderr
    assert "refused: bad-direct-register.so" in p.stderr, p.stderr
    print("missing layer type: the message names the folders and the refusals")


class TorchSE(torch.nn.Module):
    """The SE block as in the plugin, in PyTorch."""

    def __init__(self, c, r):
        super().__init__()
        h = max(1, c // r)
        self.fc1_weight = torch.nn.Parameter(torch.randn(h, c) * 0.5)
        self.fc1_bias = torch.nn.Parameter(torch.randn(h) * 0.5)
        self.fc2_weight = torch.nn.Parameter(torch.randn(c, h) * 0.5)
        self.fc2_bias = torch.nn.Parameter(torch.randn(c) * 0.5)

    def forward(self, x):
        s = x.mean(dim=(2, 3))
        g = torch.sigmoid(torch.nn.functional.linear(
            torch.relu(torch.nn.functional.linear(s, self.fc1_weight, self.fc1_bias)),
            self.fc2_weight, self.fc2_bias))
        return x * g[:, :, None, None]


def check_against_torch(env, tmp):
    torch.manual_seed(0)
    spec = {"name": "se-only", "input": {"shape": [6, 5, 4]},
            "nodes": [{"name": "se", "type": "SEBlock", "reduction": 3}]}
    sp = os.path.join(tmp, "se-only.json")
    json.dump(spec, open(sp, "w"))
    se = TorchSE(6, 3)
    x = torch.randn(3, 6, 5, 4, requires_grad=True)
    g = torch.randn(3, 6, 5, 4)
    y = se(x)
    y.backward(g)
    tensors = {"se." + k: v.detach() for k, v in se.state_dict().items()}
    tensors.update({"input": x.detach(), "grad_output": g})
    inp, out = os.path.join(tmp, "se-in.safetensors"), os.path.join(tmp, "se-out.safetensors")
    safetensors_io.save(inp, tensors)
    run([FORWARD, GOOD, sp, inp, out], env)
    got = safetensors_io.load(out)
    worst = 0.0
    pairs = [("output", y), ("grad_input", x.grad)] + [
        ("grad.se." + k, p.grad) for k, p in se.named_parameters()]
    for name, ref in pairs:
        d = float((got[name] - ref).abs().max())
        assert d < 1e-5, "%s differs from PyTorch by %g" % (name, d)
        worst = max(worst, d)
    print("SEBlock vs PyTorch: forward and %d gradients within %.2g" % (len(pairs) - 1, worst))

    # ONNX: the checker, then OpenCV's DNN against the engine
    w = os.path.join(tmp, "se-only.safetensors")
    safetensors_io.save(w, {"se." + k: v.detach() for k, v in se.state_dict().items()})
    onx = os.path.join(tmp, "se-only.onnx")
    run([EMBER, "export", sp, "--weights", w, "-o", onx, "--plugin-dir", GOOD], env)
    model = onnx.load(onx)
    onnx.checker.check_model(model, full_check=True)
    ops = sorted({n.op_type for n in model.graph.node})
    assert "GlobalAveragePool" in ops and "Mul" in ops, ops
    net = cv2.dnn.readNetFromONNX(onx)
    xs = x.detach().numpy()
    net.setInput(np.ascontiguousarray(xs))
    cv = net.forward()
    d = float(np.abs(cv - y.detach().numpy()).max())
    assert d < 1e-4, "OpenCV differs from PyTorch/the engine by %g" % d
    # without the plugin, export refuses earlier: the spec cannot even load
    p = run([EMBER, "export", sp, "--weights", w, "-o", onx + "2"], env, ok=False)
    assert p.returncode != 0 and "SEBlock" in p.stderr, p.stderr
    print("SEBlock ONNX: checker ok, OpenCV max abs diff %.2g, ops %s" % (d, ",".join(ops)))


def main():
    tmp = tempfile.mkdtemp(prefix="ember-plugins-")
    env = dict(os.environ, EMBER_HOME=os.path.join(tmp, "home"))
    env.pop("XDG_DATA_HOME", None)
    env.pop("EMBER_PLUGIN_PATH", None)
    try:
        check_listing(env)
        check_unknown_type(env, tmp)
        check_odd_dataset(env, tmp)
        check_png_values(env, tmp)
        check_against_torch(env, tmp)
        if os.path.exists(FMNIST + "/t10k-images-idx3-ubyte.gz"):
            data, _, _ = check_training(env, tmp)
            check_png_errors(env, tmp, data)
        else:
            print("Fashion-MNIST not found: skipped the png-folder training")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
