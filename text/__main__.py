"""Command line: `python -m text "prompt" --decoder ngram` (see --help)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

EXAMPLES = """\
examples:
  python -m text "What is the capital of France?" --chat
  python -m text "def fib(n):" --decoder ngram --max-new-tokens 128
  python -m text "Tell me a story." --chat --decoder lookahead --option window=4 level=4 guesses=4
  python -m text "Hello" --decoder speculative --option draft=self:8 num_draft=4
  python -m text "Once upon a time" --temperature 0.8 --top-p 0.9 --seed 0
  python -m text --input prompts.txt --output out.jsonl --chat --decoder ngram
  cat prompts.txt | python -m text --input - --output out.jsonl
  python -m text "Hello" --model ./my-model-folder

The text goes to stdout, a one-line summary (tokens, forwards, time) to stderr. With --input, each
non-empty line is one prompt; --output gets one JSON object per prompt (prompt, text, token_ids,
decoder, stats), written to a temp file and renamed at the end; without --output the JSON lines go
to stdout. The default model is the embedded SmolLM2-135M-Instruct (offline; converted once into
~/.cache/parasuite, or $PARASUITE_CACHE). Put the prompt before --option, or end the options
with --.
"""


def parse_args(argv=None) -> argparse.Namespace:
    from suite import TEXT_DECODERS

    p = argparse.ArgumentParser(prog="python -m text", description="Generate text with parasuite's parallel decoders.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", nargs="?", help="the prompt (or use --input)")
    p.add_argument("--decoder", default="auto", choices=sorted(set(TEXT_DECODERS) | {"eagle", "auto"}),
                   help="decoding algorithm (default: auto, the fastest lossless one measured per request)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="new tokens at most (default: 128)")
    p.add_argument("--model", metavar="PATH", help="a local transformers causal LM folder (default: embedded SmolLM2)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None, metavar="K")
    p.add_argument("--top-p", type=float, default=None, metavar="P")
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument("--option", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="decoder option, e.g. num_draft=6 (see suite.decoder_options); repeatable")
    p.add_argument("--stream", action="store_true", help="print text as it is committed (single prompt)")
    p.add_argument("--input", metavar="FILE", help="prompts, one per line ('-' = stdin)")
    p.add_argument("--output", metavar="FILE.jsonl", help="write one JSON object per prompt here")
    args = p.parse_args(argv)
    if (args.prompt is None) == (args.input is None):
        p.error("give either a prompt or --input FILE (not both)")
    return args


def read_prompts(source: str) -> list[str]:
    if source == "-":
        lines = sys.stdin.read().splitlines()
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no prompt file {source!r}: pass an existing text file (one prompt per line) or '-'")
        lines = path.read_text(encoding="utf-8").splitlines()
    prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{source!r} holds no prompts: write one prompt per line")
    return prompts


def run(args: argparse.Namespace) -> None:
    import suite

    options = dict(suite.parse_option(o) for o in args.option)
    suite.make_decoder(args.decoder, **options)   # bad options fail before the model loads
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    prompts = read_prompts(args.input) if args.input is not None else [args.prompt]
    if args.output is not None:
        parent = Path(args.output).expanduser().resolve().parent
        if not parent.is_dir():
            raise FileNotFoundError(f"the folder of --output {args.output!r} does not exist: create it first")

    import text
    gen = text.load(args.model)
    kwargs = dict(decoder=args.decoder, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                  top_k=args.top_k, top_p=args.top_p, seed=args.seed, chat=args.chat, **options)
    for p in prompts:   # every prompt fits before any decoding starts
        gen.encode(p, chat=args.chat)

    if args.input is None and args.output is None:
        if args.stream:
            s = gen.stream(args.prompt, **kwargs)
            for chunk in s:
                print(chunk, end="", flush=True)
            print()
            stats = s.stats
        else:
            res = gen.generate(args.prompt, **kwargs)
            print(res.text)
            stats = res.stats
        print(stats.summary(), file=sys.stderr)
        return

    from tqdm.auto import tqdm

    total = suite.DecodeStats()
    out = sys.stdout
    tmp = None
    if args.output is not None:
        target = Path(args.output).expanduser()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.resolve().parent)
        out = os.fdopen(fd, "w", encoding="utf-8")
    try:
        for p in tqdm(prompts, desc=f"{args.decoder}", unit="prompt", file=sys.stderr,
                      disable=len(prompts) == 1 and args.output is None):
            res = gen.generate(p, **kwargs)
            record = {"prompt": p, "text": res.text, "token_ids": res.token_ids, "decoder": args.decoder,
                      "finish_reason": res.finish_reason, "stats": res.stats.as_dict()}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            total.num_forwards += res.stats.num_forwards
            total.num_draft_forwards += res.stats.num_draft_forwards
            total.num_new_tokens += res.stats.num_new_tokens
            total.accepted_lengths += res.stats.accepted_lengths
            total.wall_time_s += res.stats.wall_time_s
        if tmp is not None:
            out.close()
            os.replace(tmp, target)
            tmp = None
    finally:
        if tmp is not None:
            out.close()
            os.unlink(tmp)
    where = f" -> {args.output}" if args.output else ""
    print(f"{len(prompts)} prompts{where}: {total.summary()}", file=sys.stderr)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
