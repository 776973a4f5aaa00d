#!/usr/bin/env bash
# Builds everything (CPU engine; the CUDA engine too when a toolkit is present) and runs every
# test. GPU tests skip, saying why, where no GPU is visible. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default
cmake --build --preset default -j "$(nproc)"
ctest --preset default -j "$(nproc)"
