#!/usr/bin/python3
"""mixpar's CPU training step next to PyTorch's at its best, in one run, on the same machine.

bench_gpt_step (ch08's Trainer: forward, backward, clip, AdamW on random tokens) runs the chosen
configurations, then the same GPT in PyTorch (pre-LN blocks, GELU tanh, tied token embedding
and LM head, causal attention, AdamW with decay on 2-D weights only, clip at 1.0), with the same
batch, sequence length and thread count; with --rounds N the two alternate N times and the
best of each counts. bf16 is PyTorch's CPU autocast (its matmuls in bfloat16 through oneDNN).

A ratio against a crippled peer is not a result, so PyTorch first gets its best configuration
on this machine. Its FP32 GEMMs are OpenBLAS's (Debian's python3-torch links libblas.so.3),
and OpenBLAS 0.3.21 misdetects recent Intel CPUs as old cores unless OPENBLAS_CORETYPE names
one: the script sets the core type the CPU's flags call for (SkylakeX with AVX-512, Cooperlake
with AVX512-BF16, Haswell with AVX2), tries each OpenBLAS build installed (Debian's
openblas-pthread and, with libopenblas0-openmp, openblas-openmp, chosen through
LD_LIBRARY_PATH) on a short S fp32 run and keeps the faster. It prints what PyTorch then ran
with: the BLAS library, its threading and the kernel it selected (threadpoolctl), the core type
set, thread counts, and oneDNN's ISA and bf16 matmul kernel (from ONEDNN_VERBOSE); it warns when
a baseline looks misconfigured (OpenBLAS on a core without the CPU's vector units, oneDNN on a
reference kernel, thread counts not as asked, a loaded machine). The table at the end names the
CPU and both sides' configurations and is the one to record (ch08_full_3d/PERFORMANCE.md).

PyTorch is Debian's python3-torch, which only /usr/bin/python3 sees: run from another python3
(pyenv, virtualenv), the script re-executes itself there; without torch it exits 2 saying so.
threadpoolctl is Debian's python3-threadpoolctl.

    python3 scripts/bench_vs_pytorch.py --build-dir build              # S fp32, S bf16, M fp32
    python3 scripts/bench_vs_pytorch.py --configs S_fp32,S_bf16 --rounds 2
    python3 scripts/bench_vs_pytorch.py --configs S_fp32 --pytorch-blas openblas-pthread \\
        --openblas-coretype none                                       # as Debian runs it
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

SYSTEM_PYTHON = "/usr/bin/python3"
PROGRAM = "bench_vs_pytorch"

# name -> (layers, heads, width, vocab, seq, batch, dtype); bench_gpt_step's kS and kM.
CONFIGS = {
    "S_fp32": (4, 4, 256, 256, 128, 8, "fp32"),
    "S_bf16": (4, 4, 256, 256, 128, 8, "bf16"),
    "S_fp16": (4, 4, 256, 256, 128, 8, "fp16"),
    "M_fp32": (12, 12, 768, 50257, 64, 4, "fp32"),
}
# The ratio mixpar / PyTorch each configuration is to reach.
TARGETS = {"S_fp32": 1.2, "S_bf16": 1.2, "M_fp32": 1.3}

# OpenBLAS's kernels by the vector units they use: a CPU with AVX-512 should run one of the
# first set, one with AVX2 one of the first two sets (threadpoolctl's "architecture").
OPENBLAS_AVX512 = {"SkylakeX", "Cooperlake", "SapphireRapids"}
OPENBLAS_AVX2 = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}


def fail(msg):
    print(f"{PROGRAM}: {msg}", file=sys.stderr)
    sys.exit(2)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_info(path="/proc/cpuinfo"):
    """(model name, set of flags) of the first CPU listed."""
    name, flags = "unknown CPU", set()
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name == "unknown CPU":
                    name = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return name, flags


def cpu_units(flags):
    """The vector and matrix units the CPU has, in words."""
    names = [("avx2", "AVX2"), ("f16c", "F16C"), ("avx512f", "AVX-512"),
             ("avx512_bf16", "AVX512-BF16"), ("avx512_fp16", "AVX512-FP16"),
             ("amx_bf16", "AMX-BF16")]
    return ", ".join(word for flag, word in names if flag in flags) or "no AVX2"


def cpu_description(name, flags, cores):
    return f"{name}, {cores} cores ({cpu_units(flags)})"


def expected_coretype(flags):
    """The OPENBLAS_CORETYPE whose kernels use this CPU's widest vector units, or None."""
    if "avx512_bf16" in flags:
        return "Cooperlake"
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


def blas_warnings(flags, blas, threads):
    """Why a PyTorch configuration (its threadpoolctl entry for OpenBLAS, or None) looks
    crippled on a CPU with `flags`; empty when it looks right."""
    w = []
    if blas is None:
        return ["PyTorch loaded no OpenBLAS (threadpoolctl found none): its FP32 GEMMs may run "
                "on the reference BLAS"]
    arch = blas.get("architecture") or "?"
    if "avx512f" in flags and arch not in OPENBLAS_AVX512:
        w.append(f"OpenBLAS runs its {arch} kernels on a CPU with AVX-512 (set "
                 "OPENBLAS_CORETYPE=SkylakeX or Cooperlake)")
    elif "avx2" in flags and arch not in OPENBLAS_AVX2:
        w.append(f"OpenBLAS runs its {arch} kernels on a CPU with AVX2 (set "
                 "OPENBLAS_CORETYPE=Haswell)")
    if blas.get("num_threads") != threads:
        w.append(f"OpenBLAS uses {blas.get('num_threads')} threads, not {threads}")
    return w


def onednn_warnings(flags, isa, kernel):
    w = []
    units = "amx_bf16" in flags or "avx512_bf16" in flags
    if units and kernel and (kernel.startswith("ref") or "bf16" not in kernel):
        w.append(f"oneDNN runs PyTorch's bf16 matmuls on {kernel} although the CPU has "
                 "bf16 units")
    if units and not kernel:
        w.append("oneDNN ran no bf16 matmul for PyTorch's autocast")
    if units and isa and "bfloat16" not in isa.lower():
        w.append(f"oneDNN's ISA is limited to '{isa}' (ONEDNN_MAX_CPU_ISA?)")
    return w


def parse_onednn_verbose(text):
    """(ISA line, the set of matmul kernels that ran on bf16 sources) from ONEDNN_VERBOSE."""
    isa, kernels = "", set()
    for line in text.splitlines():
        if not (line.startswith("onednn_verbose") or line.startswith("dnnl_verbose")):
            continue
        fields = line.split(",")
        if "isa:" in line and not isa:
            isa = line.split("isa:", 1)[1].strip()
        if len(fields) > 6 and fields[1] == "exec" and fields[3] == "matmul":
            if "bf16" in fields[6]:
                kernels.add(fields[4])
    return isa, kernels


def blas_variants():
    """Debian's OpenBLAS builds installed: name -> directory holding its libblas.so.3."""
    found = {}
    for lib in sorted(glob.glob("/usr/lib/*/openblas-*/libblas.so.3")):
        found[os.path.basename(os.path.dirname(lib))] = os.path.dirname(lib)
    return found


# ---- PyTorch, in a child process whose environment picks the BLAS build and core type ----

def torch_model(name):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(42)
    L, H, C, V, T, B, _ = CONFIGS[name]

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

    return GPT()


def torch_steps_per_second(name, min_time, max_steps=None):
    """Tokens per second of PyTorch's training step for `name` (None: fp16, which PyTorch 1.13
    cannot autocast on the CPU)."""
    import torch

    L, H, C, V, T, B, dtype = CONFIGS[name]
    if dtype == "fp16":
        return None
    model = torch_model(name)
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
    while steps < 2 or (time.perf_counter() - t0 < min_time and steps != max_steps):
        step(steps + 1)
        steps += 1
    return steps * B * T / (time.perf_counter() - t0)


def worker(job, names, threads, min_time):
    """Runs in the child: prints one JSON line with PyTorch's configuration and results."""
    import torch

    torch.set_num_threads(threads)
    out = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "interop_threads": torch.get_num_interop_threads(),
           "mkldnn": torch.backends.mkldnn.is_available()}
    if job == "onednn":
        # A few bf16 autocast matmuls of the model's shape, for ONEDNN_VERBOSE's lines.
        a, b = torch.randn(1024, 256), torch.randn(256, 768)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for _ in range(2):
                torch.nn.functional.linear(a, b.t())
        print(json.dumps(out), flush=True)
        return
    import threadpoolctl

    out["tok/s"] = {n: torch_steps_per_second(n, min_time) for n in names}
    out["pools"] = [{k: p.get(k) for k in ("internal_api", "threading_layer", "architecture",
                                           "num_threads", "filepath", "version")}
                    for p in threadpoolctl.threadpool_info()]
    print(json.dumps(out), flush=True)


def pytorch_env(blas_dir, coretype, threads, verbose=False):
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("OPENBLAS_CORETYPE", None)
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    if verbose:
        env["ONEDNN_VERBOSE"] = env["DNNL_VERBOSE"] = "1"
    return env


def run_worker(python, job, names, threads, min_time, env):
    cmd = [python, os.path.abspath(__file__), "--worker", job, "--configs", ",".join(names),
           "--threads", str(threads), "--min-time", str(min_time)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"PyTorch's run ({job}) failed: {err}")
    return json.loads(lines[-1]), p.stdout


def openblas_pool(result):
    for p in result.get("pools", []):
        if p.get("internal_api") == "openblas":
            return p
    return None


# ---- mixpar ----

def run_mixpar(build_dir, names, threads, min_time):
    exe = os.path.join(build_dir, "bin", "bench_gpt_step")
    if not os.path.exists(exe):
        fail(f"{exe} not found: build it first (cmake --build {build_dir} --target bench_gpt_step)")
    pattern = "BM_GptStep/(" + "|".join(names) + f")/{threads}/"
    cmd = [exe, f"--benchmark_filter={pattern}", "--benchmark_format=json",
           f"--benchmark_min_time={min_time}"]
    print("mixpar: " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{exe} failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    doc = json.loads(p.stdout)
    result = {b["name"].split("/")[1]: b["tok/s"] for b in doc["benchmarks"]}
    return result, doc.get("context", {})


def build_type(build_dir):
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            m = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", f.read(), re.M)
            return m.group(1) if m else "?"
    except OSError:
        return "?"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--configs", default="S_fp32,S_bf16,M_fp32",
                    help="comma-separated, of: " + ", ".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=5.0, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=1,
                    help="mixpar and PyTorch alternate this many times; the best of each counts")
    ap.add_argument("--pytorch-blas", default="best",
                    help="OpenBLAS build for PyTorch: 'best' (each installed one tried on a short "
                         "S fp32 run), 'default' (libblas.so.3 as installed), or a directory "
                         "name such as openblas-pthread or openblas-openmp")
    ap.add_argument("--openblas-coretype", default="auto",
                    help="OPENBLAS_CORETYPE for PyTorch: 'auto' (the one the CPU's flags call "
                         "for), 'none' (unset: OpenBLAS's own detection), or a core name")
    ap.add_argument("--probe-time", type=float, default=2.0,
                    help="seconds of S fp32 per OpenBLAS build when choosing the best")
    ap.add_argument("--worker", choices=["run", "onednn"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    names = a.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            fail(f"unknown configuration {n!r}: one of {', '.join(CONFIGS)}")
    if a.threads < 1:
        fail(f"--threads {a.threads}: need at least 1")
    if a.rounds < 1:
        fail(f"--rounds {a.rounds}: need at least 1")
    if not a.min_time > 0 or not a.probe_time > 0:
        fail("--min-time and --probe-time must be positive")
    if a.openblas_coretype not in ("auto", "none") and not re.fullmatch(r"[A-Za-z0-9]+",
                                                                        a.openblas_coretype):
        fail(f"--openblas-coretype {a.openblas_coretype!r}: 'auto', 'none' or a core name")
    a.names = names
    return a


def find_torch_python(argv, modules=("torch", "threadpoolctl"), system_python=SYSTEM_PYTHON):
    """This interpreter when it has torch and threadpoolctl; else re-executes under the system
    python, which has Debian's python3-torch; else exits 2 in one line."""
    missing = []
    for mod in modules:
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if not missing:
        return
    other = os.path.realpath(sys.executable) != os.path.realpath(system_python)
    if other and os.path.exists(system_python):
        os.execv(system_python, [system_python, os.path.abspath(__file__), *argv])
    packages = {"torch": "python3-torch", "threadpoolctl": "python3-threadpoolctl"}
    fail(f"{' and '.join(missing)} not found for {sys.executable}: apt-get install "
         + " ".join(packages.get(m, m) for m in missing) + " (Debian's, for /usr/bin/python3)")


def main(argv):
    a = parse_args(argv)
    if a.worker:
        worker(a.worker, a.names, a.threads, a.min_time)
        return
    find_torch_python(argv)
    python = sys.executable
    cpu_name, flags = cpu_info()
    cores = os.cpu_count()
    cpu = cpu_description(cpu_name, flags, cores)
    print(f"CPU: {cpu}", flush=True)
    load_before = load()
    warnings = []
    if float(load_before.split()[0]) > 0.5 * cores:
        warnings.append(f"load average {load_before} on {cores} cores: other work moves both "
                        "numbers")

    # PyTorch's configuration: core type, then the OpenBLAS build.
    coretype = {"auto": expected_coretype(flags), "none": None}.get(a.openblas_coretype,
                                                                      a.openblas_coretype)
    variants = blas_variants()
    if a.pytorch_blas == "best":
        candidates = dict(variants) or {"default": None}
    elif a.pytorch_blas == "default":
        candidates = {"default": None}
    elif a.pytorch_blas in variants:
        candidates = {a.pytorch_blas: variants[a.pytorch_blas]}
    else:
        fail(f"--pytorch-blas {a.pytorch_blas!r}: 'best', 'default' or one of the installed "
             f"builds: {', '.join(variants) or 'none found'}")
    probes = {}
    if len(candidates) > 1:
        for _ in range(2):  # alternated twice, the better of each: the machine's noise
            for v, d in candidates.items():
                r, _ = run_worker(python, "run", ["S_fp32"], a.threads, a.probe_time,
                                  pytorch_env(d, coretype, a.threads))
                probes[v] = max(probes.get(v, 0.0), r["tok/s"]["S_fp32"])
                print(f"pytorch probe: {v}, OPENBLAS_CORETYPE={coretype or 'unset'}: S fp32 "
                      f"{r['tok/s']['S_fp32']:.0f} tok/s", flush=True)
        blas_name = max(probes, key=probes.get)
    else:
        blas_name = next(iter(candidates))
    blas_dir = candidates[blas_name]
    env = pytorch_env(blas_dir, coretype, a.threads)
    _, verbose_out = run_worker(python, "onednn", ["S_bf16"], a.threads, 1.0,
                                pytorch_env(blas_dir, coretype, a.threads, verbose=True))
    onednn_isa, onednn_kernels = parse_onednn_verbose(verbose_out)
    onednn_kernel = ", ".join(sorted(onednn_kernels))

    ours, theirs, ctx, info = {}, {}, {}, None
    for rnd in range(a.rounds):
        mine, ctx = run_mixpar(a.build_dir, a.names, a.threads, a.min_time)
        for n, v in mine.items():
            ours[n] = max(ours.get(n, 0.0), v)
        print(f"round {rnd + 1} mixpar tok/s: " + ", ".join(f"{n} {mine[n]:.0f}" for n in a.names),
              flush=True)
        for n in a.names:
            r, _ = run_worker(python, "run", [n], a.threads, a.min_time, env)
            info = r
            t = r["tok/s"][n]
            if t is not None:
                theirs[n] = max(theirs.get(n, 0.0), t)
            print(f"round {rnd + 1} pytorch tok/s: {n} " + (f"{t:.0f}" if t else "not run"),
                  flush=True)
    load_after = load()

    blas = openblas_pool(info)
    warnings += blas_warnings(flags, blas, a.threads)
    warnings += onednn_warnings(flags, onednn_isa, onednn_kernel) if any(
        CONFIGS[n][6] == "bf16" for n in a.names) else []
    if info["torch_threads"] != a.threads:
        warnings.append(f"PyTorch uses {info['torch_threads']} threads, not {a.threads}")
    det_blas = None
    if coretype:  # what OpenBLAS picks on its own, for the record
        r, _ = run_worker(python, "run", ["S_fp32"], a.threads, 0.1,
                          pytorch_env(blas_dir, None, a.threads))
        det_blas = openblas_pool(r)

    print()
    print(f"CPU: {cpu}; load average {load_before} before, {load_after} after; "
          f"{a.threads} threads each; best of {a.rounds} round(s) of {a.min_time:g} s")
    print(f"mixpar: {os.path.join(a.build_dir, 'bin', 'bench_gpt_step')} "
          f"({build_type(a.build_dir)}, -march={ctx.get('mixpar_isa', '?')}); "
          f"FP32 GEMMs: {ctx.get('mixpar_fp32_gemm', '?')}; bf16 GEMMs: {ctx.get('mixpar_bf16_gemm', '?')}; fp16 GEMMs: "
          f"{ctx.get('mixpar_f16_gemm', '?')}")
    blas_words = (f"OpenBLAS {blas.get('version')} {blas_name} "
                  f"({blas.get('threading_layer')} threads: {blas.get('num_threads')}), kernel "
                  f"{blas.get('architecture')}" if blas else "no OpenBLAS loaded")
    probe_words = ("; chosen over " + ", ".join(f"{v} {t:.0f} tok/s" for v, t in probes.items()
                                                 if v != blas_name) + " on S fp32"
                   if len(probes) > 1 else "")
    print(f"PyTorch {info['torch']}: {blas_words}{probe_words}; OPENBLAS_CORETYPE="
          f"{coretype or 'unset'}" + (f" (unset, OpenBLAS detects {det_blas.get('architecture')})"
                                      if det_blas else "") +
          f"; torch threads {info['torch_threads']}, interop {info['interop_threads']}; "
          f"oneDNN (bf16 autocast): {onednn_kernel or 'no bf16 matmul'}, ISA "
          f"'{onednn_isa or '?'}'" + ("" if info["mkldnn"] else " (PyTorch built without it)"))
    for w in warnings:
        print(f"WARNING: {w}")
    print()
    print("| config | mixpar tok/s | PyTorch tok/s | mixpar / PyTorch | target |")
    print("|---|---|---|---|---|")
    for n in a.names:
        t = theirs.get(n)
        ratio = f"{ours[n] / t:.2f}x" if t else "-"
        goal = TARGETS.get(n)
        verdict = (f">= {goal}x ({'met' if t and ours[n] / t >= goal else 'not met'})" if goal
                   else "-")
        print(f"| {n.replace('_', ' ')} | {ours[n]:,.0f} | {f'{t:,.0f}' if t else '-'} | "
              f"{ratio} | {verdict} |")
    # 16-bit against mixpar's own FP32: never slower, with or without 16-bit units.
    for half in ("S_bf16", "S_fp16"):
        if half in ours and "S_fp32" in ours:
            r = ours[half] / ours["S_fp32"]
            print(f"\nmixpar {half.replace('_', ' ')} / S fp32: {r:.2f}x (>= 1.0x: "
                  f"{'met' if r >= 1.0 else 'not met'})")


if __name__ == "__main__":
    main(sys.argv[1:])
