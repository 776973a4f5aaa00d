#!/usr/bin/env bash
# Builds and runs the main demo. Usage: bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default >/dev/null
cmake --build --preset default --target ch01_fp_formats -j "$(nproc)"
./build/bin/ch01_fp_formats
