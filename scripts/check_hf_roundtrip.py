#!/usr/bin/env python3
"""Checks that train_gpt's Hugging Face directories are GPT-2 as transformers computes it, both
ways, by comparing logits on the same tokens:

  1. train_gpt trains a small model for a few steps and saves it (--save, "transformer." names);
     transformers' GPT2LMHeadModel.from_pretrained loads it; its logits must match the ones
     train_gpt dumps for the same directory (--init-from DIR --steps 0 --dump-logits FILE).
  2. transformers saves the model again (save_pretrained: GPT2LMHeadModel, and the bare
     GPT2Model without the prefix); train_gpt loads each and must give the same logits.

Not part of CI: it needs torch and transformers (checked with Debian's python3-torch 1.13 and
transformers 4.38.2 in a venv made with --system-site-packages). Exits 1 on a mismatch. Usage:

    python3 scripts/check_hf_roundtrip.py [--train-gpt build/bin/train_gpt] [--keep DIR]

Tolerance: |ours - theirs| <= 1e-4 + 1e-4 |theirs|. Both compute in FP32 with different GEMM
orders and GELU/softmax code, so they agree to ~1e-6, not bit for bit.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

PROMPT = "\n12+34="
ATOL = RTOL = 1e-4


def run(cmd):
    print("$ " + " ".join(repr(c) if "\n" in c else c for c in cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("command failed (%d): %s" % (done.returncode, done.stderr.strip()))
    return done.stdout


def ours(train_gpt, model_dir, work):
    """train_gpt's logits [T, V] and tokens [T] for model_dir."""
    out = os.path.join(work, os.path.basename(model_dir) + "_logits.safetensors")
    run([train_gpt, "--init-from", model_dir, "--steps", "0", "--seq", "16",
         "--prompt", PROMPT, "--dump-logits", out, "--threads", "1", "--overwrite"])
    t = load_file(out)
    return t["logits"].double(), t["tokens"].long()


def theirs(model, tokens):
    with torch.no_grad():
        return model(tokens.unsqueeze(0)).logits[0].double()


def compare(name, a, b):
    diff = (a - b).abs()
    bound = ATOL + RTOL * b.abs()
    worst = (diff - bound).argmax()
    ok = bool((diff <= bound).all())
    print("%-44s max |diff| %.3e (logits up to %.2f): %s"
          % (name, diff.max().item(), b.abs().max().item(), "OK" if ok else "MISMATCH"))
    if not ok:
        r, c = divmod(worst.item(), b.shape[1])
        print("  first worst at [%d, %d]: ours %.8f, transformers %.8f" % (r, c, a[r, c], b[r, c]))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-gpt", default="build/bin/train_gpt")
    ap.add_argument("--keep", help="work in this directory and keep it")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="mixpar_hf_")
    os.makedirs(work, exist_ok=True)

    trained = os.path.join(work, "trained")
    # Trained long enough for logits far from uniform: a wrong layout could not hide in them.
    run([args.train_gpt, "--steps", "300", "--n-layer", "2", "--n-embd", "64", "--n-head", "4",
         "--seq", "32", "--eval-every", "0", "--threads", "1", "--save", trained, "--overwrite"])
    model = GPT2LMHeadModel.from_pretrained(trained).eval()
    logits, tokens = ours(args.train_gpt, trained, work)
    ok = compare("train_gpt dir -> transformers", logits, theirs(model, tokens))

    for name, to_save in [("hf_lm_head", model), ("hf_bare", model.transformer)]:
        d = os.path.join(work, name)
        to_save.save_pretrained(d, safe_serialization=True)
        again, _ = ours(args.train_gpt, d, work)
        ok &= compare("transformers %s dir -> train_gpt" % name, again, theirs(model, tokens))

    print("all logits agree" if ok else "MISMATCH")
    if args.keep:
        print("files kept in", work)
    else:
        shutil.rmtree(work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
