#!/bin/sh
# tests/gpu/pack.sh: builds the GPU test programs on this machine and packs
# them for a GPU machine that has the NVIDIA driver, the CUDA libraries
# (cuBLAS, cuDNN: the toolkit's or PyTorch's pip wheels) and python3, but
# none of Debian's packages (the rented GPU machines: nothing can be
# installed there). The bundle, .gpu-bundle/bundle.tar.xz (git-ignored),
# holds:
#   bin/   ember and the C test programs of suite gpu (test-device-ops,
#          test-train-device-api, test-cuda-alloc), built with -Dcuda=enabled,
#          without the GUI and MPI, for any x86-64 (-Dnative=false);
#   lib/   the shared libraries they load that such a machine lacks
#          (OpenBLAS, jansson, libpng, protobuf-c, SQLite, GLib, ...: what
#          ldd lists, less glibc, the C++ runtime and the CUDA libraries);
#   data/  Fashion-MNIST: the first 20000 training images and the whole test
#          set (the gpu tests train on --limit 10000).
# tests/gpu/run-bundle.sh unpacks it there and runs suite gpu's checks and
# the GPU benchmark. The working tree travels with it (the test scripts and
# model specs come from there), so the bundle stays well under the 64 MiB
# a machine's working tree may have.
#
# usage: tests/gpu/pack.sh [BUILD]   (BUILD default build-gpu-pack)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu-pack}
OUTDIR=$ROOT/.gpu-bundle
STAGE=$OUTDIR/stage
FMNIST=/usr/share/datasets/fashion-mnist

if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" "$ROOT" -Dcuda=enabled -Dgui=disabled -Dmpi=disabled -Dnative=false \
    >/dev/null
fi
PROGRAMS="app/ember tests/device/test-device-ops tests/device/test-train-device-api
  tests/gpu/test-cuda-alloc"
ninja -C "$BUILD" $PROGRAMS >/dev/null

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/data"
for p in $PROGRAMS; do cp "$BUILD/$p" "$STAGE/bin/"; done

# Shared libraries: every one ldd resolves, except those any Linux with
# the NVIDIA stack has (glibc, the C++ runtime) and the CUDA ones, which
# must match the machine's driver (found there by run-bundle.sh).
for p in $PROGRAMS; do ldd "$BUILD/$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r soname path; do
    case "$soname" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|\
    libgcc_s.so.*|libcudnn*|libcublas*|libcuda.so.*|libcudart*|libnccl*) continue ;;
    esac
    cp -L "$path" "$STAGE/lib/$soname"
  done

# Fashion-MNIST: the first 20000 training samples, the whole test set.
/usr/bin/python3 - "$FMNIST" "$STAGE/data" 20000 <<'PY'
import gzip, os, shutil, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def cut(name, header, per):
    with gzip.open(os.path.join(src, name), "rb") as f:
        raw = f.read()
    head = bytearray(raw[:header])
    head[4:8] = n.to_bytes(4, "big")
    with gzip.open(os.path.join(dst, name), "wb", compresslevel=9) as f:
        f.write(bytes(head) + raw[header:header + n * per])
cut("train-images-idx3-ubyte.gz", 16, 28 * 28)
cut("train-labels-idx1-ubyte.gz", 8, 1)
for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
    shutil.copy(os.path.join(src, name), os.path.join(dst, name))
PY

git -C "$ROOT" rev-parse HEAD > "$STAGE/COMMIT" 2>/dev/null || true
tar -C "$STAGE" -cJf "$OUTDIR/bundle.tar.xz" .
rm -rf "$STAGE"
ls -l "$OUTDIR/bundle.tar.xz"
echo "run it there: tests/gpu/run-bundle.sh (device tool: carry .gpu-bundle)"
