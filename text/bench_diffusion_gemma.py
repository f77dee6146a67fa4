"""`python -m text.bench --group diffusion_gemma`: DiffusionGemma (transformers' block-diffusion LM) on a
tiny random config built in-process (no weights ship): the family's own `generate`, our `diffusion_gemma`
decoder (its sampler) with the same seeds, and every block commit rule on the same model, interleaved per
prompt. Reports forwards per new token (decoder passes for the family's generate, which it counts the
same way), tokens per forward, wall time, and agreement with the family's sampler: prompts whose tokens
are identical, and the share of positions equal. A random model's text means nothing: the figures show
the parallelism each rule gets from confident predictions and that the sampler is the family's own.
`--model FOLDER` runs the same on a DiffusionGemma folder of your own.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import suite
from suite.registry import CANVAS_DECODERS

SECTION = "text-diffusion-gemma"      # BENCHMARKS.md's section (suite.runtime.bench_page)


# DiffusionGemma always builds Gemma 4's vision tower (16 layers of 768 by default): a tiny one keeps it cheap
TINY_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2, head_dim=8, position_embedding_size=64)


def tiny_model(canvas_length: int = 8, init: float = 2.0, seed: int = 0):
    """A random DiffusionGemma (vocab 99, hidden 32, 2 layers, 2 experts); `init` scales the weights so the
    predictions are confident, as a trained model's are (the default init gives near-uniform ones)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    text = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, global_head_dim=16, sliding_window=64, max_position_embeddings=512,
                layer_types=["sliding_attention", "full_attention"], num_experts=2, top_k_experts=1,
                moe_intermediate_size=32, initializer_range=init)
    torch.manual_seed(seed)
    config = DiffusionGemmaConfig(text_config=text, vision_config=TINY_VISION, canvas_length=canvas_length,
                                  initializer_range=init)
    return DiffusionGemmaForBlockDiffusion(config).eval()


def family_runner(model, passes, **settings):
    """The family's generate: new tokens (the first max_new), decoder passes (`passes`, a hook's counter)."""
    def run(ids, max_new, seed):
        passes["n"] = 0
        torch.manual_seed(seed)
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_new, **settings)
        return out.sequences[0, len(ids):len(ids) + max_new].tolist(), passes["n"]
    return run


def suite_runner(adapter, name, **options):
    def run(ids, max_new, seed):
        out = suite.generate(adapter, [ids], decoder=name, max_new_tokens=max_new, seed=seed, **options)
        return out.new_tokens[0], out.stats.num_forwards
    return run


def runners(adapter, steps: int):
    """(label, run, the label whose tokens it is compared with): the family's generate and our sampler with
    its defaults and with `steps` denoising steps at most, then the block commit rules."""
    passes = {"n": 0}
    adapter.model.model.decoder.register_forward_hook(lambda *_: passes.__setitem__("n", passes["n"] + 1))
    fast, family, budget = {"max_denoising_steps": steps}, "family generate", f"family generate, {steps} steps"
    out = [(family, family_runner(adapter.model, passes), family),
           ("diffusion_gemma", suite_runner(adapter, "diffusion_gemma"), family),
           (budget, family_runner(adapter.model, passes, **fast), budget),
           (f"diffusion_gemma, {steps} steps", suite_runner(adapter, "diffusion_gemma", **fast), budget)]
    return out + [(n, suite_runner(adapter, n), family) for n in CANVAS_DECODERS[1:]]


def measure(runs, prompts, max_new):
    """Every prompt through every run in turn; per run totals, agreement with its reference's tokens."""
    rows = {label: {"tokens": 0, "forwards": 0, "time": 0.0, "same": 0, "equal": 0, "positions": 0}
            for label, _, _ in runs}
    for seed, ids in enumerate(prompts):
        done = {}
        for label, run, ref in runs:
            t0 = time.perf_counter()
            tokens, forwards = run(ids, max_new, seed)
            r = rows[label]
            r["time"] += time.perf_counter() - t0
            done[label] = tokens
            reference = done[ref]
            r["tokens"] += len(tokens)
            r["forwards"] += forwards
            r["same"] += tokens == reference
            r["equal"] += sum(a == b for a, b in zip(tokens, reference))
            r["positions"] += len(reference)
    return rows


def table(rows, n) -> str:
    head = ("| decoder | new tokens | forwards | forwards/token | tokens/forward | ms/token | same tokens as the family "
            "| positions equal |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, r in rows.items():
        lines.append(f"| {label} | {r['tokens']} | {r['forwards']} | {r['forwards'] / r['tokens']:.2f} | "
                     f"{r['tokens'] / r['forwards']:.2f} | {1e3 * r['time'] / r['tokens']:.1f} | {r['same']}/{n} | "
                     f"{100 * r['equal'] / max(r['positions'], 1):.0f}% |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m text.bench --group diffusion_gemma", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="FOLDER", help="a DiffusionGemma folder (default: a tiny random config)")
    p.add_argument("--prompts", type=int, default=6, help="random prompts, one seed each (default 6)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--steps", type=int, default=8,
                   help="the sampler's step budget in the second pair of runs (default 8)")
    from suite.runtime.bench_page import PAGE, add_write_argument
    add_write_argument(p)
    p.add_argument("--out", type=Path, default=PAGE, help="the page --write writes (default: BENCHMARKS.md)")
    return p.parse_args(argv)


def main(argv, write_benchmarks) -> None:
    """Run from `python -m text.bench --group diffusion_gemma` (which passes its BENCHMARKS.md writer)."""
    from .diffusion_gemma import DiffusionGemmaAdapter, load_folder
    args = parse_args([a for a in argv if a not in ("--group", "diffusion_gemma")])
    adapter = load_folder(args.model)[0] if args.model else DiffusionGemmaAdapter(tiny_model())
    vocab = adapter.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (8,), generator=gen).tolist() for _ in range(args.prompts)]
    runs = runners(adapter, args.steps)
    for _, run, _ in runs:       # warm up every path once
        run(prompts[0], 4, 0)
    rows = measure(runs, prompts, args.max_new_tokens)
    model = args.model or ("tiny random DiffusionGemma (vocab 99, hidden 32, 2 layers, 2 experts, canvas_length 8, "
                           "init scale 2.0 so predictions are confident)")
    flags = " ".join(argv)
    body = "\n\n".join([
        f"Command: `python -m text.bench {flags}`; {model}; {args.prompts} random 8-token prompts, prompt i with "
        f"seed i, max_new_tokens={args.max_new_tokens}, {torch.get_num_threads()} threads. The family's generate and "
        "`diffusion_gemma` run its defaults (48 denoising steps at most, entropy bound 0.1, temperature 0.8 to 0.4, "
        f"stop when stable and confident), then with max_denoising_steps={args.steps}; the block commit rules their "
        "own defaults (block_size 8). forwards = "
        "decoder passes (each of ours also encodes the tokens committed since the last one, as the family's encoder "
        "does once per canvas). Agreement is with the family's generate for the same prompt, seed and settings "
        "(its defaults for the block commit rules).",
        table(rows, len(prompts))])
    print(body)
    if args.write:
        write_benchmarks(body, args.out, SECTION)
        print(f"\nwrote {args.out}")
