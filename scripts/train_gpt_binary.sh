# Sourced by the demos: sets train_gpt to $MIXPAR_TRAIN_GPT when given (no set-up, no build),
# else installs what is missing, configures the default preset and builds train_gpt.
train_gpt="${MIXPAR_TRAIN_GPT:-}"
if [ -z "$train_gpt" ]; then
  bash scripts/install_deps.sh
  export PATH="/usr/local/cuda/bin:$PATH"
  cmake --preset default >/dev/null
  cmake --build --preset default --target train_gpt -j "$(nproc)"
  train_gpt=./build/bin/train_gpt
fi
