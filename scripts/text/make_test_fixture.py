#!/usr/bin/env python3
"""Writes tests/data/text/: a small text fixture of the trainer's text tests.

    python3 scripts/text/make_test_fixture.py --texts DIR   (DIR: the *_gut.txt works, as
                                                           scripts/prepare_text.sh unpacks them)

  hamlet_train.txt, hamlet_val.txt  the first 12,288 and the next 4,096 bytes of Hamlet
                                    (Project Gutenberg, public domain; docs/SOURCES.md)
  tiny_tokenizer/encoder.json, vocab.bpe  a vocabulary in GPT-2's file format: the 256 bytes in
                                    GPT-2's order (ids 0..255, as GPT-2's own), four merges
                                    ("Ġ t", "h e", "Ġt he", "e r") and "<|endoftext|>" (id 260)
"""
import argparse
import json
import os

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "text")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.texts, "hamlet_gut.txt"), "rb") as f:
        hamlet = f.read()
    os.makedirs(os.path.join(OUT, "tiny_tokenizer"), exist_ok=True)
    with open(os.path.join(OUT, "hamlet_train.txt"), "wb") as f:
        f.write(hamlet[:12288])
    with open(os.path.join(OUT, "hamlet_val.txt"), "wb") as f:
        f.write(hamlet[12288:12288 + 4096])
    b2u = bytes_to_unicode()
    encoder = {c: i for i, c in enumerate(b2u.values())}  # GPT-2's order of the bytes
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("e", "r")]
    for left, right in merges:
        encoder[left + right] = len(encoder)
    encoder["<|endoftext|>"] = len(encoder)
    with open(os.path.join(OUT, "tiny_tokenizer", "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    with open(os.path.join(OUT, "tiny_tokenizer", "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{l} {r}\n" for l, r in merges))


if __name__ == "__main__":
    main()
