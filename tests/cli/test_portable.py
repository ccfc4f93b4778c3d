#!/usr/bin/env python3
"""test_portable.py: the same `ember` binary on older processors, run
under QEMU's user-mode emulation with a CPU model that lacks what this
machine has (qemu-x86_64 -cpu MODEL; QEMU 7.2 emulates up to AVX2, no
AVX-512): an AVX2 processor (Haswell, like a Zen 3) and an x86-64 one
without AVX (Nehalem). For each it checks that

  - `ember devices --json` finds the processor's level (cpuid and XGETBV
    as the emulated processor answers them) and picks that kernel set;
  - `ember profile` runs training steps of fmnist-mlp (the GEMM) and
    fmnist-cnn (convolutions, Winograd, pooling) to the end: any
    instruction past the emulated processor's kills it with SIGILL, as a
    -Dnative=true build on this machine is killed (exit 132);
  - a cap above the processor's level is said and ignored.

OPENBLAS_CORETYPE is removed from the environment (this workplace sets
it to Haswell, which the Nehalem model cannot run), and so are
EMBER_CPU_ISA and the kernel picks (CI runs this suite under caps too):
Ember and OpenBLAS pick their kernels from the emulated cpuid, as on a
real machine.

Exits 77 (skip) where qemu-x86_64 is missing or the host is not x86-64.

usage: test_portable.py EMBER SOURCE_ROOT
"""
import json
import os
import platform
import shutil
import subprocess
import sys

SKIP = 77
MODELS = [("Haswell", "avx2"), ("Nehalem", "generic")]
CHOICES = ("EMBER_CPU_ISA", "EMBER_BF16_KERNEL", "EMBER_QUANT_KERNEL")


def run(qemu, model, exe, *args, env=None):
    # the emulated processor's own choice: no cap or kernel pick from the caller
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("OPENBLAS_") and k not in CHOICES}
    e.update(env or {})
    p = subprocess.run([qemu, "-cpu", model, exe] + list(args), capture_output=True, text=True,
                       timeout=300, env=e)
    # QEMU warns of host features its TCG does not emulate (pcid, x2apic, ...)
    err = "\n".join(l for l in p.stderr.splitlines() if not l.startswith("qemu-x86_64: warning"))
    assert p.returncode == 0, "ember %s on %s: exit %d%s\n%s" % (
        " ".join(args), model, p.returncode,
        " (SIGILL: an instruction this processor lacks)" if p.returncode in (132, -4) else "",
        err[-3000:])
    return p.stdout, err


def main():
    exe, source = sys.argv[1], sys.argv[2]
    qemu = shutil.which("qemu-x86_64")
    if not qemu or platform.machine() != "x86_64":
        print("skip: no qemu-x86_64 (Debian's qemu-user) or not an x86-64 host")
        return SKIP
    for model, level in MODELS:
        out, _ = run(qemu, model, exe, "devices", "--json")
        cpu = [d for d in json.loads(out)["devices"] if d["kind"] == "cpu"][0]
        assert cpu["isa_detected"] == level and cpu["isa"] == level, (model, cpu)
        assert cpu["kernels"] == level, (model, cpu)
        assert cpu["bf16_kernel"] == "emulated", (model, cpu)
        assert cpu["int8_kernel"] == ("avx2" if level == "avx2" else "sse2"), (model, cpu)
        for spec in ("fmnist-mlp.json", "fmnist-cnn.json"):
            out, _ = run(qemu, model, exe, "profile", os.path.join(source, "data", "models", spec),
                         "--steps", "2", "--warmup", "1", "--batch", "16", "--threads", "2",
                         "--top", "3")
            assert "leak check" in out, out[-2000:]
        _, err = run(qemu, model, exe, "devices", env={"EMBER_CPU_ISA": "avx512"})
        assert "EMBER_CPU_ISA=avx512: this processor runs at most %s" % level in err, err
        print("ok: %s: %s kernels, fmnist-mlp and fmnist-cnn steps" % (model, level))
    return 0


if __name__ == "__main__":
    sys.exit(main())
