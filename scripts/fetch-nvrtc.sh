#!/usr/bin/env bash
# Fetches NVRTC (the CUDA run-time compiler) from PyPI, for machines with no
# CUDA toolkit: vramtop compiles its kernels with it, and its tests use it to
# check that assets/kernels/vramtop.ptx is current.
#
# usage: scripts/fetch-nvrtc.sh DEST
#   Downloads the wheel nvidia-cuda-nvrtc-cu12 into DEST (no dependencies, no
#   install), unpacks it there and prints, as the last line of stdout, the
#   directory that holds libnvrtc.so.12. Running it again reuses what is
#   there. Point VRAMTOP_NVRTC_LIB at "$(that directory)/libnvrtc.so.12".
#
# The version is pinned because the shipped PTX is compared byte for byte
# (after its header) with what this NVRTC produces; override it with
# VRAMTOP_NVRTC_VERSION (a different version makes that comparison skip).
#
# Exits 0 with a note on stderr and prints nothing on stdout when python3 or
# pip is missing, so CI on such a machine just skips the NVRTC checks.
set -euo pipefail

version=${VRAMTOP_NVRTC_VERSION:-12.9.86}
dest=${1:?usage: scripts/fetch-nvrtc.sh DEST}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
unpacked=$dest/nvidia-cuda-nvrtc-cu12-$version

find_lib() {
  find "$unpacked" -name 'libnvrtc.so.12' -type f -print -quit 2>/dev/null
}

lib=$(find_lib || true)
if [ -z "$lib" ]; then
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "fetch-nvrtc: python3 -m pip is not available; NVRTC not fetched (its checks will skip)" >&2
    exit 0
  fi
  wheels=$dest/wheels
  mkdir -p "$wheels"
  # manylinux x86-64 wheel for any CPython: the library inside does not
  # depend on Python, so the interpreter's version does not matter.
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --dest "$wheels" "nvidia-cuda-nvrtc-cu12==$version" >&2
  wheel=$(find "$wheels" -name "nvidia_cuda_nvrtc_cu12-$version-*.whl" -print -quit)
  if [ -z "$wheel" ]; then
    echo "fetch-nvrtc: pip downloaded no nvidia_cuda_nvrtc_cu12-$version wheel into $wheels" >&2
    exit 1
  fi
  rm -rf "$unpacked.partial"
  python3 -m zipfile -e "$wheel" "$unpacked.partial"
  mv "$unpacked.partial" "$unpacked"
  # The unpacked copy is all that is needed (pip keeps its own cache).
  rm -f "$wheel"
  lib=$(find_lib || true)
  if [ -z "$lib" ]; then
    echo "fetch-nvrtc: $wheel holds no libnvrtc.so.12" >&2
    exit 1
  fi
fi
dirname "$lib"
