#!/usr/bin/env python3
"""Writes tests/data/gpt_fixture/: a tiny GPT-2 and what PyTorch computes with it, the
reference that GptModel.MatchesPyTorchReference compares the C++ model with.

The model is written directly in torch from the Hugging Face GPT-2 math (pre-LN blocks,
LayerNorm eps 1e-5, learned positions, causal attention scaled by 1/sqrt(head_dim), GELU tanh,
LM head tied to wte), so `transformers` is not needed. Everything runs in float64 on weights
drawn in float32 (the C++ model loads them exactly). Deterministic: the same torch version
writes the same bytes. Needs a python3 with torch (Debian: apt-get install python3-torch, whose
interpreter is /usr/bin/python3):

    /usr/bin/python3 scripts/make_gpt_fixture.py [output_dir]

fixture.safetensors (F32 inputs, F64 results; the config in __metadata__):
  <HF name>            every parameter, F32, e.g. "h.0.attn.c_attn.weight" [C, 3C]
  tokens, targets      [B, T] token ids as F32 (exact), targets = tokens shifted by one
  logits [B, T, V], loss [1]            forward
  grad.<HF name>                        gradient of the mean loss
  adamw.wd0.losses [4], adamw.wd0.1.losses [4]
      loss before and after each of 3 AdamW steps (lr 1e-3, betas 0.9/0.999, eps 1e-8) on the
      same batch; weight decay 0.0, or 0.1 on 2-D tensors only (none on biases/LayerNorm)
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

CONFIG = {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 16, "vocab_size": 64}
B, T = 2, 16
SEED = 20240520


def param_specs(cfg):
    """(name, shape, kind) in Hugging Face order; kind picks the initial distribution."""
    c, specs = cfg["n_embd"], []
    specs.append(("wte.weight", (cfg["vocab_size"], c), "embedding"))
    specs.append(("wpe.weight", (cfg["n_positions"], c), "position"))

    def layernorm(prefix):
        specs.append((prefix + ".weight", (c,), "ln_weight"))
        specs.append((prefix + ".bias", (c,), "bias"))

    def linear(prefix, n_in, n_out):
        specs.append((prefix + ".weight", (n_in, n_out), "weight"))
        specs.append((prefix + ".bias", (n_out,), "bias"))

    for layer in range(cfg["n_layer"]):
        h = "h.%d" % layer
        layernorm(h + ".ln_1")
        linear(h + ".attn.c_attn", c, 3 * c)
        linear(h + ".attn.c_proj", c, c)
        layernorm(h + ".ln_2")
        linear(h + ".mlp.c_fc", c, 4 * c)
        linear(h + ".mlp.c_proj", 4 * c, c)
    layernorm("ln_f")
    return specs


def make_params(cfg, gen):
    """Float32 weights larger than GPT-2's init (N(0, 0.02) would leave the logits nearly
    uniform and the gradients tiny), LayerNorm weights near 1, non-zero biases: every term of
    every gradient matters."""
    stds = {"embedding": 0.3, "position": 0.1, "weight": 0.1, "bias": 0.05, "ln_weight": 0.1}
    params = {}
    for name, shape, kind in param_specs(cfg):
        x = torch.randn(shape, generator=gen, dtype=torch.float32) * stds[kind]
        if kind == "ln_weight":
            x = x + 1.0
        params[name] = x
    return params


def gpt2_loss(p, cfg, tokens, targets):
    """Mean cross-entropy over B*T and the logits [B, T, V]."""
    c, nh = cfg["n_embd"], cfg["n_head"]
    hd = c // nh
    bsz, seq = tokens.shape
    x = p["wte.weight"][tokens] + p["wpe.weight"][:seq]
    mask = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    for layer in range(cfg["n_layer"]):
        h = "h.%d." % layer
        a = F.layer_norm(x, (c,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = (t.view(bsz, seq, nh, hd).transpose(1, 2) for t in qkv.split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(bsz, seq, c)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        a = F.layer_norm(x, (c,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        a = F.gelu(a @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + a @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (c,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    logits = x @ p["wte.weight"].t()
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    return loss, logits


def adamw_losses(params32, cfg, tokens, targets, weight_decay):
    """Loss before and after each of 3 AdamW steps, decay on 2-D tensors only."""
    p = {n: t.double().clone().requires_grad_(True) for n, t in params32.items()}
    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss, _ = gpt2_loss(p, cfg, tokens, targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    with torch.no_grad():
        losses.append(gpt2_loss(p, cfg, tokens, targets)[0].item())
    return torch.tensor(losses, dtype=torch.float64)


def write_safetensors(path, tensors, metadata):
    """The safetensors layout of the reference `serialize`: tensors by dtype size (largest
    first) then name, __metadata__ first, header padded with spaces to a multiple of 8."""
    codes = {torch.float32: "F32", torch.float64: "F64"}
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in order:
        t = tensors[name].contiguous()
        data = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gpt_fixture")
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one reduction order: the same bytes on every run
    gen = torch.Generator().manual_seed(SEED)
    params32 = make_params(CONFIG, gen)
    stream = torch.randint(0, CONFIG["vocab_size"], (B * T + 1,), generator=gen)
    tokens, targets = stream[:-1].view(B, T), stream[1:].view(B, T)

    p = {n: t.double().requires_grad_(True) for n, t in params32.items()}
    loss, logits = gpt2_loss(p, CONFIG, tokens, targets)
    loss.backward()

    tensors = dict(params32)
    tensors["tokens"] = tokens.float()
    tensors["targets"] = targets.float()
    tensors["logits"] = logits.detach()
    tensors["loss"] = loss.detach().view(1)
    for name, t in p.items():
        tensors["grad." + name] = t.grad
    tensors["adamw.wd0.losses"] = adamw_losses(params32, CONFIG, tokens, targets, 0.0)
    tensors["adamw.wd0.1.losses"] = adamw_losses(params32, CONFIG, tokens, targets, 0.1)
    metadata = {k: str(v) for k, v in CONFIG.items()}
    metadata.update({"B": str(B), "T": str(T), "torch": torch.__version__})
    path = os.path.join(out_dir, "fixture.safetensors")
    write_safetensors(path, tensors, metadata)
    print("wrote %s (%d bytes): loss %.6f, AdamW wd 0.1 losses %s" % (
        os.path.normpath(path), os.path.getsize(path), loss.item(),
        ", ".join("%.6f" % v for v in tensors["adamw.wd0.1.losses"].tolist())))


if __name__ == "__main__":
    main()
