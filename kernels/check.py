"""`python -m kernels.check [--out REPORT.md]`: the GPU check, within minutes on one GPU.

1. the GPU-marked tests (Triton kernels vs references, on CUDA tensors);
2. SmolLM2 on the GPU: per-forward latency of `ar` and each decoder's speedup over `ar`;
3. achieved memory bandwidth of the `ar` step (weight bytes x forwards/s) against a measured
   device-to-device copy bandwidth.
Writes a markdown report (stdout too). Exits 2 without a CUDA GPU.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

DECODERS = ["ar", "jacobi", "lookahead", "ngram"]
PROMPT = "Rewrite this function with type hints:\n\ndef add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"


def copy_bandwidth_gbs(size_mb: int = 1024) -> float:
    x = torch.empty(size_mb * 2**20, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    return 2 * 10 * x.numel() / (time.perf_counter() - t) / 1e9   # read + write


def decoder_table(max_new: int) -> list[str]:
    import suite
    import text
    gen = text.load(device="cuda")
    ids, mask = gen.encode([PROMPT], chat=True)
    ids, mask = ids.cuda(), mask.cuda()
    rows, base = [], None
    weight_bytes = sum(p.numel() * p.element_size() for p in gen.model.parameters())
    for name in DECODERS:
        suite.generate(gen.model, ids, mask, decoder=name, max_new_tokens=8)   # warm up
        torch.cuda.synchronize()
        out = suite.generate(gen.model, ids, mask, decoder=name, max_new_tokens=max_new)
        torch.cuda.synchronize()
        s = out.stats
        base = base or s.tokens_per_second
        per_forward_ms = 1e3 * s.wall_time_s / s.num_forwards
        bandwidth = weight_bytes * s.num_forwards / s.wall_time_s / 1e9
        rows.append(f"| {name} | {s.num_forwards} | {s.tokens_per_forward:.2f} | {per_forward_ms:.2f} | "
                    f"{s.tokens_per_second:.1f} | {s.tokens_per_second / base:.2f}x | {bandwidth:.0f} |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="also write the report here")
    p.add_argument("--max-new-tokens", type=int, default=128)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; run this on a GPU machine", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"], cwd=root,
                           capture_output=True, text=True)
    lines = [f"# GPU check ({torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')})", "",
             "GPU tests: " + (tests.stdout.strip().splitlines() or ["(no output)"])[-1], "",
             f"Device copy bandwidth: {copy_bandwidth_gbs():.0f} GB/s", "",
             "| decoder | forwards | tok/forward | ms/forward | tok/s | speedup | weight GB/s |",
             "|---|---|---|---|---|---|---|", *decoder_table(args.max_new_tokens)]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0 if tests.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
