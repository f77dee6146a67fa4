"""`python -m kernels.check [--out REPORT.md]`: the GPU check, within minutes on one GPU.

1. the GPU-marked tests (Triton kernels vs references, on CUDA tensors);
2. per-step latency of the `ar` step on SmolLM2 and on the vision prior: eager over the dynamic
   cache, eager over the static cache, and compiled over the static cache (CUDA graphs on a
   GPU), each checked token for token against eager;
3. SmolLM2: each decoder's speedup over `ar`, and the achieved memory bandwidth of its steps
   (weight bytes x forwards/s) against a measured device-to-device copy bandwidth.
Writes a markdown report (stdout too). Exits 2 without a CUDA GPU, unless `--device cpu`, which
runs part 2 alone on the CPU. `--overhead`: the loop's own time per step of every text decoder, as
a fraction of its forwards (tiny 2-layer Llama and SmolLM2, CPU); `--cost-curve`: SmolLM2's
cost(N)/cost(1) with plain linear layers and with suite.linear_forms (CPU).
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


def loop_overhead(model, ids, decoder: str, max_new: int, **options) -> tuple[float, int]:
    """(the loop's own time per step as a fraction of the time inside the model's forwards,
    forwards) for one greedy request: step time minus forward time, timed by hooks on the model
    (a self-draft that shares the model's modules counts as forward time)."""
    import suite
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter   # robust to a shared CPU
    inside, start = [0.0], [0.0]
    pre = model.register_forward_pre_hook(lambda *_: start.__setitem__(0, clock()))
    post = model.register_forward_hook(lambda *_: inside.__setitem__(0, inside[0] + clock() - start[0]))
    try:
        suite.generate(model, ids, decoder=decoder, max_new_tokens=8, **options)     # warm up
        inside[0] = 0.0
        adapter, dec, state = suite.prepare(model, ids, decoder=decoder, max_new_tokens=max_new, **options)
        t0 = clock()
        result = suite.decode(adapter, dec, state)
        total = clock() - t0
    finally:
        pre.remove()
        post.remove()
    return (total - inside[0]) / max(inside[0], 1e-9), result.stats.num_forwards


def overhead_table(max_new: int) -> list[str]:
    """Loop overhead of every registered text decoder on a tiny 2-layer Llama and on SmolLM2."""
    import suite
    import text
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                        eos_token_id=None, pad_token_id=0, bos_token_id=None)).eval()
    with torch.no_grad():
        tiny.get_output_embeddings().weight.mul_(8.0)
    gen = text.load(device="cpu", progress=False)
    smol_ids, _ = gen.encode([PROMPT], chat=True)
    tiny_ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11]])
    rows = []
    for name in suite.TEXT_DECODERS:
        options = {"draft": "self:1"} if name == "speculative" else {}
        cells = []
        for model, ids in ((tiny, tiny_ids), (gen.model, smol_ids)):
            try:
                frac, forwards = loop_overhead(model, ids, name, max_new, **options)
                cells.append(f"{100 * frac:.0f}% ({forwards} fw)")
            except (ValueError, RuntimeError) as e:
                cells.append(f"n/a ({str(e)[:40]})")
        rows.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return ["| decoder | tiny 2-layer Llama | SmolLM2-135M |", "|---|---|---|", *rows]


def cost_curve_table(rounds: int = 4, context: int = 700, widths=(1, 2, 4, 8, 16)) -> list[str]:
    """SmolLM2's forward cost(N)/cost(1) after `context` cached tokens, with plain nn.Linear /
    "sdpa" and with suite.linear_forms swapped in, measured in alternation (the fastest of
    `rounds` rounds per width; CPU time of the process under one thread)."""
    import text.model
    from suite import HFCausalLM
    from suite.cost import measure_curve
    from suite.linear_forms import swap_linears, unswap_linears
    model, _ = text.model.load_embedded(progress=False)
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    runs = {"plain": [], "swapped": []}
    for _ in range(rounds):
        for label in runs:
            (unswap_linears if label == "plain" else swap_linears)(model)
            runs[label].append(measure_curve(HFCausalLM(model), context=context, widths=widths, repeats=2,
                                             clock=clock).seconds)
    rows = []
    for label, found in runs.items():
        best = [min(r[i] for r in found) for i in range(len(widths))]
        rows.append(f"| {label} | {1e3 * best[0]:.1f} | " + " | ".join(f"{b / best[0]:.2f}x" for b in best[1:]) + " |")
    return [f"| linear layers | cost(1) ms | " + " | ".join(f"cost({w})" for w in widths[1:]) + " |",
            "|---|---|" + "---|" * (len(widths) - 1), *rows]


def _emit(report: str, out: Path | None, status: int = 0) -> int:
    print(report)
    if out:
        out.write_text(report + "\n")
    return status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="also write the report here")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: only the eager vs compiled step latency, on this machine's CPU")
    p.add_argument("--overhead", action="store_true",
                   help="only the loop-overhead table (on the CPU): each text decoder's own step time as a "
                        "fraction of its forwards")
    p.add_argument("--cost-curve", action="store_true",
                   help="only SmolLM2's cost(N)/cost(1) on the CPU, plain vs suite.linear_forms")
    args = p.parse_args(argv)
    if args.cost_curve:
        report = "\n".join([f"# SmolLM2 forward cost curve (CPU, {torch.get_num_threads()} threads, 700 cached tokens)",
                            "", *cost_curve_table()])
        return _emit(report, args.out)
    if args.overhead:
        report = "\n".join([f"# Loop overhead (CPU, {torch.get_num_threads()} threads, "
                            f"{args.max_new_tokens} new tokens, greedy)", "", *overhead_table(args.max_new_tokens)])
        return _emit(report, args.out)
    latency_header = ["| model | ar step | ms/step | speedup | same tokens as eager |", "|---|---|---|---|---|"]
    if args.device == "cpu":
        report = "\n".join([f"# Step latency on the CPU ({torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')})",
                            "", *latency_header, *latency_table("cpu", args.max_new_tokens)])
        return _emit(report, args.out)
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
    return _emit("\n".join(lines), args.out, 0 if tests.returncode == 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
