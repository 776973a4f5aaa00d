#!/usr/bin/env bash
# Installs the Debian packages mixpar builds with, when they are missing (Debian 12);
# python3-matplotlib draws the course's figures (scripts/figures.py).
# python3-venv holds the text runs' reference tokenizer (scripts/prepare_text.sh).
# python3-torch, with OpenBLAS for its FP32 GEMMs (Debian's reference BLAS otherwise), is the
# other side of scripts/bench_vs_pytorch.py. libdnnl-dev (oneDNN) runs bf16/fp16 GEMMs on CPUs
# with 16-bit units (common/ops/onednn_matmul.h); without it they widen to FP32.
# Run as root, or as a user with sudo. The CUDA toolkit and NCCL are optional and never
# installed here: when /usr/local/cuda exists the GPU engine compiles too. clang builds the
# libFuzzer harnesses of fuzz/ (scripts/test.sh fuzz).
set -euo pipefail

packages=(cmake ninja-build g++ make libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
          libopenmpi-dev openmpi-bin python3 python3-venv python3-matplotlib
          python3-torch libopenblas0-pthread clang libdnnl-dev)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: need root or sudo to install: ${missing[*]}" >&2; exit 2; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
