#!/usr/bin/env bash
# Builds and runs the main demo: the GPT trainer learning the built-in addition dataset on the
# CPU (a couple of minutes on two cores), printing loss, gradient norm, learning rate, tokens/s
# and held-out accuracy as it goes. Extra arguments go to train_gpt (see --help).
# Usage: bash scripts/demo.sh [train_gpt flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default >/dev/null
cmake --build --preset default --target train_gpt -j "$(nproc)"
./build/bin/train_gpt "$@"
