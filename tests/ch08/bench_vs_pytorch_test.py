"""scripts/bench_vs_pytorch.py gives PyTorch a fair configuration and says when it cannot:
the OpenBLAS core type it sets for a CPU's vector units, the warnings for a crippled baseline
(OpenBLAS on an old core, thread counts, oneDNN off its bf16 units), the oneDNN kernel and ISA
read from ONEDNN_VERBOSE, the CPU's name and units, and one line with exit code 2 for a bad
flag or a missing PyTorch. The measurement itself needs PyTorch and minutes and is not run here.

    python3 tests/ch08/bench_vs_pytorch_test.py --repo .
"""
import argparse
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile

SPR = {"avx2", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"}
ZEN3 = {"avx2", "f16c"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def load_script(repo):
    spec = importlib.util.spec_from_file_location(
        "bench_vs_pytorch", os.path.join(repo, "scripts", "bench_vs_pytorch.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    repo = ap.parse_args().repo
    b = load_script(repo)
    script = os.path.join(repo, "scripts", "bench_vs_pytorch.py")

    # The core type follows the widest units.
    check(b.expected_coretype(SPR) == "Cooperlake", "AVX512-BF16 CPU -> Cooperlake")
    check(b.expected_coretype({"avx2", "avx512f"}) == "SkylakeX", "AVX-512 CPU -> SkylakeX")
    check(b.expected_coretype(ZEN3) == "Haswell", "AVX2 CPU -> Haswell")
    check(b.expected_coretype(set()) is None, "no AVX2 -> no core type set")

    # OpenBLAS on a generic core is flagged; on the right one it is not.
    good = {"architecture": "Cooperlake", "num_threads": 2}
    check(b.blas_warnings(SPR, good, 2) == [], "Cooperlake kernels on an AVX-512 CPU: no warning")
    for arch in ("Prescott", "Haswell", "Sandybridge"):
        w = b.blas_warnings(SPR, {"architecture": arch, "num_threads": 2}, 2)
        check(len(w) == 1 and arch in w[0] and "AVX-512" in w[0],
              f"{arch} kernels on an AVX-512 CPU are flagged: {w}")
    w = b.blas_warnings(ZEN3, {"architecture": "Prescott", "num_threads": 2}, 2)
    check(len(w) == 1 and "AVX2" in w[0], f"Prescott on an AVX2 CPU is flagged: {w}")
    check(b.blas_warnings(ZEN3, {"architecture": "Zen", "num_threads": 2}, 2) == [],
          "Zen kernels on an AVX2 CPU: no warning")
    w = b.blas_warnings(SPR, {"architecture": "SkylakeX", "num_threads": 1}, 2)
    check(len(w) == 1 and "1 threads, not 2" in w[0], f"a thread count not as asked: {w}")
    check(len(b.blas_warnings(SPR, None, 2)) == 1, "no OpenBLAS loaded is flagged")

    # oneDNN: the ISA line and the bf16 matmul kernel from ONEDNN_VERBOSE (oneDNN 2.6's format).
    verbose = "\n".join([
        "onednn_verbose,info,oneDNN v2.6.3 (commit N/A)",
        "onednn_verbose,info,cpu,runtime:OpenMP,nthr:2",
        "onednn_verbose,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support and "
        "Intel AMX with bfloat16 and 8-bit integer support",
        "onednn_verbose,info,gpu,runtime:none",
        "onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:ab:f0 dst_bf16::blocked:"
        "ab:f0,,,1024x256,0.1",
        "onednn_verbose,exec,cpu,matmul,brg:avx512_core_amx_bf16,undef,src_bf16::blocked:ab:f0 "
        "wei_bf16::blocked:ab:f0 dst_bf16::blocked:ab:f0,,,1024x256:256x768:1024x768,0.5",
        "onednn_verbose,exec,cpu,matmul,gemm:jit,undef,src_f32::blocked:ab:f0 wei_f32::blocked:"
        "ab:f0 dst_f32::blocked:ab:f0,,,8x8:8x8:8x8,0.01",
    ])
    isa, kernels = b.parse_onednn_verbose(verbose)
    check("AMX" in isa and "bfloat16" in isa, f"oneDNN's ISA line is read: {isa!r}")
    check(kernels == {"brg:avx512_core_amx_bf16"}, f"only bf16 matmuls' kernels count: {kernels}")
    check(b.onednn_warnings(SPR, isa, "brg:avx512_core_amx_bf16") == [], "AMX kernel: no warning")
    check(len(b.onednn_warnings(SPR, isa, "ref:any")) == 1, "a reference bf16 kernel is flagged")
    check(len(b.onednn_warnings(SPR, isa, "")) == 1, "no bf16 matmul at all is flagged")
    check(len(b.onednn_warnings(SPR, "Intel AVX-512", "brg:avx512_core")) == 2,
          "an ISA capped below bf16 is flagged")
    check(b.onednn_warnings(ZEN3, "Intel AVX2", "") == [], "no bf16 units: nothing to expect")

    # The CPU named with its units, from a cpuinfo file.
    with tempfile.NamedTemporaryFile("w", suffix="cpuinfo", delete=False) as f:
        f.write("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 avx512f "
                "avx512_bf16 amx_bf16\n\nprocessor\t: 1\nmodel name\t: other\n")
    name, flags = b.cpu_info(f.name)
    os.unlink(f.name)
    desc = b.cpu_description(name, flags, 2)
    check(desc == "Test CPU 9000, 2 cores (AVX2, AVX-512, AVX512-BF16, AMX-BF16)", desc)

    # Without PyTorch, and no system python to re-execute under: one line, exit 2.
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            b.find_torch_python([], modules=("mixpar_no_such_module",),
                                system_python="/nonexistent/python3")
        check(False, "a missing torch must exit")
    except SystemExit as e:
        lines = err.getvalue().strip().splitlines()
        check(e.code == 2 and len(lines) == 1 and "mixpar_no_such_module not found" in lines[0],
              f"missing torch: exit {e.code}, stderr {err.getvalue()!r}")

    # Bad flags: one line on stderr naming the problem, exit 2 (before any import of torch).
    for args, word in ((["--configs", "S_fp64"], "S_fp64"), (["--threads", "0"], "--threads"),
                       (["--rounds", "0"], "--rounds"), (["--min-time", "-1"], "--min-time"),
                       (["--openblas-coretype", "a;b"], "--openblas-coretype")):
        p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 2 and len(lines) == 1 and word in lines[0],
              f"{args}: exit {p.returncode}, stderr {p.stderr!r}")

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
