#!/usr/bin/env python3
"""Tokenizes the Gutenberg Shakespeare with GPT-2's BPE and writes llm.c token shards.

    python3 scripts/text/prepare_text.py --texts DIR --encoder encoder.json --vocab vocab.bpe --out OUT

Run by scripts/prepare_text.sh inside its virtual environment (tiktoken, the reference GPT-2
tokenizer, loads the two local files; nothing is downloaded). Writes into OUT:
  corpus.txt        every work, in file-name order, each after "<|endoftext|>" (GPT-2's
                    document separator, id 50256): the text both tokenizers encode
  train.bin val.bin GPT-2 ids of corpus.txt, split at 90% of its tokens (llm.c's format: 256
                    int32 of header, magic 20240520, version 1, count; then uint16 ids)
  char_train.bin char_val.bin  the same split of the works' bytes (ids = bytes, vocabulary
                    256; works separated by a blank line), for quick byte-level runs
  encoder.json vocab.bpe  copies of GPT-2's files, for train_gpt --tokenizer OUT
  summary.json      counts and the files' SHA-256
Exits 2 with one line when an input is missing, a file's hash is not GPT-2's, or the corpus
is empty.
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import struct
import sys

# The SHA-256 of OpenAI's GPT-2 encoder.json and vocab.bpe, as tiktoken pins them for its
# "gpt2" encoding (tiktoken_ext/openai_public.py); docs/SOURCES.md.
ENCODER_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
# GPT-2's pre-tokenizer, as released with the model (the pattern tiktoken documents as the
# original of its faster equivalent).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"
VAL_FRACTION = 0.1


def fail(msg):
    print(f"prepare_text.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_shard(path, ids):
    if any(i >= 65536 for i in ids):
        fail(f"{path}: an id does not fit uint16")
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(ids)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    os.replace(tmp, path)


def reference_encoding(encoder, vocab):
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local files, cache nothing
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=vocab, encoder_json_file=encoder,
                                            vocab_bpe_hash=VOCAB_SHA256,
                                            encoder_json_hash=ENCODER_SHA256)
    return tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256}, explicit_n_vocab=50257)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", required=True, help="folder of the *_gut.txt works")
    ap.add_argument("--encoder", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for path, want in ((a.encoder, ENCODER_SHA256), (a.vocab, VOCAB_SHA256)):
        if not os.path.isfile(path):
            fail(f"{path}: no such file")
        if sha256(path) != want:
            fail(f"{path}: SHA-256 {sha256(path)} is not GPT-2's ({want})")
    works = sorted(glob.glob(os.path.join(a.texts, "*_gut.txt")))
    texts = []
    for w in works:
        with open(w, "rb") as f:
            texts.append(f.read().decode("utf-8"))
    if not texts or not any(t.strip() for t in texts):
        fail(f"{a.texts}: no text in *_gut.txt (an empty corpus)")
    os.makedirs(a.out, exist_ok=True)
    corpus = "".join(EOT + t for t in texts)
    with open(os.path.join(a.out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(corpus)
    enc = reference_encoding(a.encoder, a.vocab)
    ids = enc.encode(corpus, allowed_special={EOT})
    if enc.decode(ids) != corpus:
        fail("the reference tokenizer does not decode its own ids to the corpus")
    split = int(len(ids) * (1 - VAL_FRACTION))
    write_shard(os.path.join(a.out, "train.bin"), ids[:split])
    write_shard(os.path.join(a.out, "val.bin"), ids[split:])
    raw = "\n\n".join(texts).encode("utf-8")
    csplit = int(len(raw) * (1 - VAL_FRACTION))
    write_shard(os.path.join(a.out, "char_train.bin"), list(raw[:csplit]))
    write_shard(os.path.join(a.out, "char_val.bin"), list(raw[csplit:]))
    for src, name in ((a.encoder, "encoder.json"), (a.vocab, "vocab.bpe")):
        shutil.copyfile(src, os.path.join(a.out, name))
    summary = {
        "works": len(works), "corpus_bytes": len(corpus.encode("utf-8")),
        "gpt2_tokens": len(ids), "train_tokens": split, "val_tokens": len(ids) - split,
        "char_train_tokens": csplit, "char_val_tokens": len(raw) - csplit,
        "encoder_json_sha256": ENCODER_SHA256, "vocab_bpe_sha256": VOCAB_SHA256,
        "reference": f"tiktoken {tiktoken_version()}",
    }
    with open(os.path.join(a.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(f"{len(works)} works, {summary['corpus_bytes']:,} bytes, {len(ids):,} GPT-2 tokens "
          f"(train {split:,}, val {len(ids) - split:,}); bytes: train {csplit:,}, "
          f"val {len(raw) - csplit:,}; in {a.out}")


def tiktoken_version():
    import importlib.metadata
    return importlib.metadata.version("tiktoken")


if __name__ == "__main__":
    main()
