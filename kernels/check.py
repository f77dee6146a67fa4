"""`python -m kernels.check [--out REPORT.md]`: the GPU check, within minutes on one GPU.

1. the GPU-marked tests (Triton kernels vs references, on CUDA tensors);
2. per-step latency of the `ar` step on SmolLM2 and on the vision prior: eager over the dynamic
   cache, eager over the static cache, and compiled over the static cache (CUDA graphs on a
   GPU), each checked token for token against eager;
3. SmolLM2: each decoder's speedup over `ar`, and the achieved memory bandwidth of its steps
   (weight bytes x forwards/s) against a measured device-to-device copy bandwidth.
Writes a markdown report (stdout too). Exits 2 without a CUDA GPU, unless `--device cpu`, which
runs part 2 alone on the CPU.
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


def step_ms(model, ids, mask, max_new: int) -> tuple[float, list[int]]:
    """Mean latency of the `ar` steps after the prefill, and the tokens the request made."""
    import suite
    suite.generate(model, ids, mask, max_new_tokens=8)     # warm up (and compile)
    _sync()
    steps = suite.stream(model, ids, mask, max_new_tokens=max_new)
    tokens = list(next(steps).committed[0])
    _sync()
    t, n = time.perf_counter(), 0
    for step in steps:
        tokens += step.committed[0]
        n += 1
    _sync()
    return 1e3 * (time.perf_counter() - t) / max(n, 1), tokens


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def latency_models(device: str):
    """(label, transformers model, prompt ids, mask) for SmolLM2 and the vision prior."""
    import text
    import vision
    gen = text.load(device=device, progress=False)
    ids, mask = gen.encode([PROMPT], chat=True)
    prior = vision.load_image_pipeline().prior
    class_token = torch.tensor([[prior.class_token(0)]], device=device)
    return [("SmolLM2-135M", gen.model, ids.to(device), mask.to(device)),
            ("vision prior", prior.model.to(device), class_token, torch.ones_like(class_token))]


def latency_table(device: str, max_new: int) -> list[str]:
    from suite import HFCausalLM
    from suite.static_cache import StaticHFCausalLM
    mode = "reduce-overhead" if device == "cuda" else None
    rows = []
    for label, model, ids, mask in latency_models(device):
        cap = ids.shape[1] + max_new + 16
        variants = [("eager, dynamic cache", HFCausalLM(model)),
                    ("eager, static cache", StaticHFCausalLM(model, cap, compiled_widths=())),
                    (f"compiled ({mode or 'default'}), static cache", StaticHFCausalLM(model, cap, (1,), mode))]
        base_ms, base_tokens = None, None
        for name, adapter in variants:
            ms, tokens = step_ms(adapter, ids, mask, max_new)
            base_ms, base_tokens = base_ms or ms, base_tokens or tokens
            rows.append(f"| {label} | {name} | {ms:.2f} | {base_ms / ms:.2f}x | {'yes' if tokens == base_tokens else 'NO'} |")
    return rows


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
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: only the eager vs compiled step latency, on this machine's CPU")
    args = p.parse_args(argv)
    latency_header = ["| model | ar step | ms/step | speedup | same tokens as eager |", "|---|---|---|---|---|"]
    if args.device == "cpu":
        report = "\n".join([f"# Step latency on the CPU ({torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')})",
                            "", *latency_header, *latency_table("cpu", args.max_new_tokens)])
        print(report)
        if args.out:
            args.out.write_text(report + "\n")
        return 0
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; run this on a GPU machine", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"], cwd=root,
                           capture_output=True, text=True)
    lines = [f"# GPU check ({torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')})", "",
             "GPU tests: " + (tests.stdout.strip().splitlines() or ["(no output)"])[-1], "",
             *latency_header, *latency_table("cuda", args.max_new_tokens), "",
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
