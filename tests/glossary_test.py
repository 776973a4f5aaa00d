#!/usr/bin/env python3
"""The glossary covers the book: every term of TERMS has an entry in docs/GLOSSARY.md (an
<a id="..."> anchor followed by the bold term), and every term of TERMS is still used by the
chapters' READMEs or docs/ (a term no page uses any more is dropped from the list, so the list
stays the book's vocabulary). Add a term here when a chapter starts using one.

  python3 tests/glossary_test.py --repo DIR      check the repository
  python3 tests/glossary_test.py --self-test     the checker fails on a missing entry
"""
import argparse
import glob
import os
import re
import sys
import tempfile

# term: (its anchor in GLOSSARY.md, a regex of its uses in the pages, case-insensitive)
TERMS = {
    "accumulator": ("accumulator", r"\baccumulat"),
    "amax": ("amax", r"\bamax\b"),
    "BF16": ("bf16", r"\bbf16\b"),
    "binade": ("binade", r"\bbinades?\b"),
    "E4M3": ("e4m3", r"\be4m3\b"),
    "FP16": ("fp16", r"\bfp16\b"),
    "GEMM": ("gemm", r"\bgemms?\b"),
    "subnormal": ("subnormal", r"\bsubnormals?\b"),
    "swamping": ("swamping", r"\bswamp"),
    "tensor core": ("tensor-core", r"\btensor cores?\b"),
    "ulp": ("ulp", r"\bulps?\b"),
    "loss scaling": ("loss-scaling", r"\bloss scal"),
    "found-inf": ("found-inf", r"\bfound-inf\b"),
    "skipped step": ("skipped-step", r"\bskipped steps?\b"),
    "master weights": ("master-weights", r"\bmaster weights?\b|\bmasters\b"),
    "AdamW": ("adamw", r"\badamw\b"),
    "gradient clipping": ("clipping", r"\bclip"),
    "ledger": ("ledger", r"\bledger\b"),
    "model states": ("model-states", r"\bmodel states\b"),
    "delayed scaling": ("delayed-scaling", r"\bdelayed scaling\b"),
    "current scaling": ("current-scaling", r"\bcurrent scaling\b"),
    "blockwise scaling": ("blockwise-scaling", r"\bblockwise\b"),
    "promotion": ("promotion", r"\bpromot"),
    "recomputation": ("recompute", r"\brecomput"),
    "all-reduce": ("all-reduce", r"\ball-reduce"),
    "all-gather": ("all-gather", r"\ball-gather"),
    "reduce-scatter": ("reduce-scatter", r"\breduce-scatter"),
    "bucket": ("bucket", r"\bbuckets?\b"),
    "DDP": ("ddp", r"\bddp\b"),
    "micro-batch": ("micro-batch", r"\bmicro-batch"),
    "gradient accumulation": ("gradient-accumulation", r"\baccumulat\w* (?:of )?gradients?\b|\bgradient accumulation\b|--grad-accum"),
    "ring all-reduce": ("ring", r"\bring\b"),
    "ZeRO": ("zero", r"\bzero-?[123]?\b"),
    "shard": ("shard", r"\bshards?\b"),
    "tensor parallelism": ("tensor-parallel", r"\btensor parallel"),
    "sequence parallelism": ("sequence-parallel", r"\bsequence parallel"),
    "column-parallel": ("column-parallel", r"\bcolumn-parallel\b"),
    "row-parallel": ("row-parallel", r"\brow-parallel\b"),
    "f and g": ("f-and-g", r"\bf and g\b"),
    "context parallelism": ("context-parallel", r"\bcontext parallel"),
    "ring attention": ("ring-attention", r"\bring attention\b"),
    "log-sum-exp": ("log-sum-exp", r"\blog-sum-exp\b"),
    "zigzag split": ("zigzag", r"\bzigzag\b"),
    "all-to-all": ("all-to-all", r"\ball-to-all\b"),
    "pipeline parallelism": ("pipeline-parallel", r"\bpipeline parallel"),
    "bubble": ("bubble", r"\bbubbles?\b"),
    "1F1B": ("1f1b", r"\b1f1b\b"),
    "interleaved": ("interleaved", r"\binterleaved\b"),
    "ZB-H1": ("zb-h1", r"\bzb-h1\b"),
    "ZB-V": ("zb-v", r"\bzb-v\b"),
    "DualPipeV": ("dualpipev", r"\bdualpipev\b"),
    "stage": ("stage", r"\bstages?\b"),
    "count-once rule": ("count-once", r"\bcount-once\b"),
    "MFU": ("mfu", r"\bmfu\b"),
    "rank grid": ("rank-grid", r"\bgrid\b"),
    "tied embedding": ("tied-embedding", r"\btied\b"),
    "addition task": ("addition-task", r"\baddition (?:task|dataset)\b"),
    "cosine schedule": ("cosine-schedule", r"\bcosine\b"),
    "OpenMP": ("openmp", r"\bopenmp\b"),
    "safetensors": ("safetensors", r"\bsafetensors\b"),
    "Philox": ("philox", r"\bphilox\b"),
    "Mixture of Experts": ("moe", r"\bmixture[- ]of[- ]experts\b|\bmoe\b"),
    "router": ("router", r"\brouters?\b"),
    "top-k gating": ("top-k-gating", r"\btop-k\b"),
    "expert capacity": ("expert-capacity", r"\bcapacity\b"),
    "aux loss": ("aux-loss", r"\baux(?:iliary)? loss\b"),
    "router z-loss": ("z-loss", r"\bz-loss\b"),
    "expert bias": ("expert-bias", r"\bexpert bias\b"),
    "router collapse": ("router-collapse", r"\brouter collapse\b"),
    "expert parallelism": ("expert-parallel", r"\bexpert parallel"),
    "grouped GEMM": ("grouped-gemm", r"\bgrouped gemms?\b"),
}


def pages(repo):
    out = sorted(glob.glob(os.path.join(repo, "ch0*", "*.md")))
    out += [p for p in sorted(glob.glob(os.path.join(repo, "docs", "*.md")))
            if not p.endswith("GLOSSARY.md")]
    out.append(os.path.join(repo, "README.md"))
    return [p for p in out if os.path.isfile(p)]


def check(repo, terms):
    problems = []
    glossary = open(os.path.join(repo, "docs", "GLOSSARY.md"), encoding="utf-8").read()
    anchors = re.findall(r'<a id="([^"]+)"></a>\*\*', glossary)
    for a in sorted({a for a in anchors if anchors.count(a) > 1}):
        problems.append(f"docs/GLOSSARY.md: the anchor '{a}' is defined twice")
    text = "\n".join(open(p, encoding="utf-8").read() for p in pages(repo))
    for term, (anchor, uses) in terms.items():
        if anchor not in anchors:
            problems.append(f"docs/GLOSSARY.md: no entry for '{term}' (<a id=\"{anchor}\"></a>**...**)")
        if not re.search(uses, text, re.I):
            problems.append(f"'{term}' is used by no chapter or doc any more: drop it from "
                            "tests/glossary_test.py")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        os.makedirs(os.path.join(d, "ch01_x"))
        with open(os.path.join(d, "docs", "GLOSSARY.md"), "w") as f:
            f.write('<a id="gemm"></a>**GEMM** - C = A B.\n')
        with open(os.path.join(d, "ch01_x", "README.md"), "w") as f:
            f.write("A GEMM sums in FP32 with an amax.\n")
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write("top\n")
        terms = {"GEMM": ("gemm", r"\bgemm\b"), "amax": ("amax", r"\bamax\b"),
                 "bubble": ("bubble", r"\bbubble\b")}
        got = check(d, terms)
        want = ["no entry for 'amax'", "no entry for 'bubble'", "'bubble' is used by no"]
        missing = [w for w in want if not any(w in g for g in got)]
        extra = [g for g in got if "GEMM" in g]
        if missing or extra or len(got) != 3:
            print("self-test failed:", got)
            return 1
    print("self-test: a missing entry and an unused term are both reported")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    problems = check(os.path.abspath(a.repo), TERMS)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} glossary problem(s)")
        return 1
    print(f"{len(TERMS)} terms: each has a glossary entry and is used by the pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
