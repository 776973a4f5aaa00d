#!/usr/bin/python3
"""mixpar's CPU training step next to PyTorch's, in one run, on the same machine and load.

First bench_gpt_step (ch08's Trainer: forward, backward, clip, AdamW on random tokens) runs the
chosen configurations, then the same GPT in PyTorch (pre-LN blocks, GELU tanh, tied token
embedding and LM head, causal attention, AdamW with decay on 2-D weights only, clip at 1.0),
with the same batch, sequence length and thread count. Printed: tokens per second of each,
their ratio, and `uptime`'s load before and after, since other processes on the machine move
both numbers. PyTorch is Debian's python3-torch (scripts/install_deps.sh installs it); bf16 is
PyTorch's CPU autocast (its matmuls in bfloat16 through oneDNN where the CPU has bf16 units).

    python3 scripts/bench_vs_pytorch.py --build-dir build              # S fp32, S bf16, M fp32
    python3 scripts/bench_vs_pytorch.py --configs S_fp32 --threads 1
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

# name -> (layers, heads, width, vocab, seq, batch, dtype); bench_gpt_step's kS and kM.
CONFIGS = {
    "S_fp32": (4, 4, 256, 256, 128, 8, "fp32"),
    "S_bf16": (4, 4, 256, 256, 128, 8, "bf16"),
    "S_fp16": (4, 4, 256, 256, 128, 8, "fp16"),
    "M_fp32": (12, 12, 768, 50257, 64, 4, "fp32"),
}


def fail(msg):
    print(f"bench_vs_pytorch: {msg}", file=sys.stderr)
    sys.exit(2)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_mixpar(build_dir, names, threads, min_time):
    exe = os.path.join(build_dir, "bin", "bench_gpt_step")
    if not os.path.exists(exe):
        fail(f"{exe} not found: build it first (cmake --build {build_dir} --target bench_gpt_step)")
    pattern = "BM_GptStep/(" + "|".join(names) + f")/{threads}/"
    cmd = [exe, f"--benchmark_filter={pattern}", "--benchmark_format=json",
           f"--benchmark_min_time={min_time}"]
    print("mixpar: " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = {}
    for b in json.loads(out)["benchmarks"]:
        name = b["name"].split("/")[1]
        result[name] = b["tok/s"]
    return result


def run_pytorch(name, threads, min_time):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(42)
    L, H, C, V, T, B, dtype = CONFIGS[name]
    if dtype == "fp16":
        return None  # PyTorch 1.13 has no fp16 autocast on the CPU

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, x):
            q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.attn_proj(y)
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

    model = GPT()
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    data = torch.randint(0, V, (16, B, T + 1), generator=g)

    def step(i):
        batch = data[i % 16]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(batch[:, :-1], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step(0)  # warm-up: buffers allocated, oneDNN kernels created
    steps, t0 = 0, time.perf_counter()
    while steps < 2 or time.perf_counter() - t0 < min_time:
        step(steps + 1)
        steps += 1
    return steps * B * T / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--configs", default="S_fp32,S_bf16,M_fp32",
                    help="comma-separated, of: " + ", ".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=5.0, help="seconds per measurement")
    a = ap.parse_args()
    names = a.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            fail(f"unknown configuration {n!r}: one of {', '.join(CONFIGS)}")
    if a.threads < 1:
        fail(f"--threads {a.threads}: need at least 1")
    try:
        import torch  # noqa: F401
    except ImportError:
        fail("PyTorch not found: install Debian's python3-torch (bash scripts/install_deps.sh) "
             "and run this with /usr/bin/python3")

    load_before = load()
    ours = run_mixpar(a.build_dir, names, a.threads, a.min_time)
    print("mixpar tok/s: " + ", ".join(f"{n} {ours[n]:.0f}" for n in names), flush=True)
    theirs = {}
    for n in names:
        theirs[n] = run_pytorch(n, a.threads, a.min_time)
        print(f"pytorch tok/s: {n} {theirs[n]:.0f} ({a.threads} threads)" if theirs[n]
              else f"pytorch: {n} not run", flush=True)
    load_after = load()

    import torch
    print(f"\n{a.threads} threads; load before {load_before}, after {load_after}; "
          f"PyTorch {torch.__version__}")
    print(f"  {'config':8}  {'mixpar tok/s':>12}  {'PyTorch tok/s':>13}  {'mixpar/PyTorch':>14}")
    for n in names:
        t = theirs[n]
        ratio = f"{ours[n] / t:.2f}x" if t else "-"
        print(f"  {n:8}  {ours[n]:12.0f}  {(f'{t:.0f}' if t else '-'):>13}  {ratio:>14}")


if __name__ == "__main__":
    main()
