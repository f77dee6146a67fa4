"""The fixed step against free widths (suite.models.step), in one run: plain transformers `generate` in
float32 (what a user would run), then per dtype `ar` and the default decoder (`auto`) with free widths and
with every step W slots over a static cache (eager, or compiled with --compile SETTING), on held-out chat.

    python -m text.bench --step                      # float32 and bfloat16, W from suite.models.step
    python -m text.bench --step --widths 4 8 --compile freezing --max-new-tokens 64

Each row: tokens/s, speed against transformers float32, against free-width `ar` of its dtype, forwards, the
share of the time spent in the model's forwards (the rest: drafting, acceptance, bookkeeping),
on how many prompts its tokens equal its own `ar`'s (the same dtype and step: bitwise exactness), and on how
many they equal transformers float32 `generate`'s (what a dtype costs in agreement with the float32 model)."""
from __future__ import annotations

import time

import torch

import suite
from suite.models.step import STEP_WIDTH, fixed_step
from suite.runtime.options import cli_parser


def parse_args(argv):
    p = cli_parser("python -m text.bench --step", __doc__)
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--widths", nargs="+", type=int, default=[STEP_WIDTH], help="fixed step widths to run")
    p.add_argument("--compile", default=None, metavar="SETTING", help="compile the fixed step (suite.models.compiled)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=6, help="held-out chat prompts (default 6)")
    return p.parse_args(argv)


def _timed(run, rows):
    outs, forwards, in_forwards, t0 = [], 0, 0.0, time.perf_counter()
    for r in rows:
        tokens, n, seconds = run(r)
        outs.append(tokens)
        forwards, in_forwards = forwards + n, in_forwards + seconds
    return outs, forwards, time.perf_counter() - t0, in_forwards


def _decoder_run(gen, adapter, name, new):
    decoder = gen.bench_decoder(name)    # the model's own options (eagle's head, sam_decoding's corpus), a fresh tree

    def run(row):
        out = suite.generate(adapter, [row], decoder=decoder, max_new_tokens=new)
        return out.sequences[0, len(row):].tolist(), out.stats.num_forwards, out.stats.forward_time_s
    return run


def main(argv=None) -> None:
    import text
    from text.prompts import held_out_group
    args = parse_args(argv)
    prompts = [p for p, chat in held_out_group(args.prompts) if chat][:args.prompts]
    lines = [f"Command: `python -m text.bench --step {' '.join(argv or [])}`; {torch.get_num_threads()} threads, "
             f"{len(prompts)} held-out chat prompts, max_new_tokens={args.max_new_tokens}, greedy.", "",
             "| dtype | step | decoder | tok/s | vs transformers fp32 | vs free ar | forwards | time in forwards "
             "| = own ar | = transformers fp32 |", "|---|---|---|---|---|---|---|---|---|---|"]
    plain = truth = None
    for dtype in args.dtypes:
        gen = text.load(dtype=dtype, progress=False)
        rows = [gen.encode([p], chat=True)[0][0].tolist() for p in prompts]
        if plain is None:                  # transformers' own generate, float32: what a user would run
            hf = text.load(dtype="float32", progress=False).model

            def generate(row, model=hf):
                ids = torch.tensor([row])
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                     do_sample=False, pad_token_id=gen.tokenizer.eos_token_id)
                return out[0, len(row):].tolist(), out.shape[1] - len(row), 0.0
            generate(rows[0][:4])
            truth, _, seconds, _ = _timed(generate, rows)
            plain = sum(map(len, truth)) / seconds
            lines.append(f"| float32 | transformers generate | - | {plain:.1f} | 1.00x | | | | | |")
        steps = [("free", suite.as_adapter(gen.model))] + [
            (f"fixed W={w}" + (f", {args.compile}" if args.compile else ""), fixed_step(gen.model, w, setting=args.compile))
            for w in args.widths]
        free_ar = None
        for label, adapter in steps:
            if args.compile and label != "free":
                adapter.warm(background=False)
            reference = None
            for name in ("ar", "auto"):
                run = _decoder_run(gen, adapter, name, args.max_new_tokens)
                run(rows[0][:4])                                    # warm-up (cost curve, caches)
                outs, forwards, seconds, in_forwards = _timed(run, rows)
                rate = sum(map(len, outs)) / seconds
                reference = outs if name == "ar" else reference
                free_ar = rate if (label, name) == ("free", "ar") else free_ar
                same, agree = (sum(a == b for a, b in zip(outs, other)) for other in (reference, truth))
                lines.append(f"| {dtype} | {label} | {name} | {rate:.1f} | {rate / plain:.2f}x | {rate / free_ar:.2f}x "
                             f"| {forwards} | {in_forwards / seconds:.0%} | {same}/{len(rows)} | {agree}/{len(rows)} |")
                print(lines[-1], flush=True)
    print("\n".join(lines))
