"""Command line: `python -m text "prompt" --decoder ngram` (see --help)."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
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
  python -m text "Hello" --model model.Q8_0.gguf --chat                 # on llama.cpp (--runtime torch: on torch)
  python -m text "def fib(n):" --decoder ngram --compare
  python -m text "caption en" --model ./paligemma-folder --image photo.jpg --decoder ngram
  python -m text "Why is the sky blue?" --model ./diffusiongemma-folder --seed 0       # its own sampler
  python -m text "Why is the sky blue?" --model ./diffusiongemma-folder --decoder entropy_bounded
  python -m text --input prompts.txt --output out.jsonl --engine ray --workers 2
  python -m text "Extract the person: Ada, 36, engineer." --chat --json-schema person.schema.json
  python -m text "Give a date:" --regex "[0-9]{4}-[0-9]{2}-[0-9]{2}"

The text goes to stdout, a one-line summary (tokens, forwards, time) to stderr. With --input, each
non-empty line is one prompt; --output gets one JSON object per prompt (prompt, text, token_ids,
decoder, finish_reason, stats), written whole at the end from per-prompt parts kept beside it
(an interrupted job resumes where it stopped), with FILE.jsonl.manifest.jsonl holding each prompt's
status; without --output the JSON lines go to stdout. --json-schema FILE (a JSON schema) or --regex
PATTERN constrains the output (every decoder; the grammar's forced tokens are committed in parallel):
the text printed is the JSON (or the match), and records get "json", the parsed object (null where
max_new_tokens ended inside the structure, with "parse_error" saying so). --engine ray decodes on a Ray Data actor
pool (--workers N) with the same records. Exit status: 0 done, 1 some prompts failed, 2 bad
arguments. With --model a vision-language folder (Florence-2, PaliGemma, Kosmos-2, GOT-OCR2,
Qwen2-VL), --image PATH is the image the prompt asks about (one prompt; the answer prints whole).
The default model is the embedded SmolLM2-135M-Instruct (offline; converted once into
~/.cache/parasuite, or $PARASUITE_CACHE). --option's items are KEY=VALUE: a last word without "=" after
them is the prompt (or end the options with --).
"""


def parse_args(argv=None) -> argparse.Namespace:
    from suite import TEXT_DECODERS
    from suite.registry import CANVAS_DECODERS
    from suite.runtime.jobs.cli import add_batch_arguments
    from suite.models.dtypes import add_dtype_argument
    from suite.params import DEFAULT_MAX_NEW_TOKENS
    from text.generator import DEFAULT_DECODER        # the app's default too (apps/text.py)

    names = sorted(set(TEXT_DECODERS) | {"eagle", "auto"} | set(CANVAS_DECODERS))
    p = argparse.ArgumentParser(prog="python -m text", description="Generate text with parasuite's parallel decoders.",
                                epilog=describe_registered(names) + "\n\n" + EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", nargs="?", help="the prompt (or use --input)")
    p.add_argument("--decoder", default=None, choices=names,
                   help=f"decoding algorithm (default: {DEFAULT_DECODER}, the fastest lossless one measured per request; "
                        f"{VLM_DECODER} for a vision-language folder)")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, metavar="N",
                   help=f"new tokens at most (default: {DEFAULT_MAX_NEW_TOKENS}, as every front end)")
    p.add_argument("--model", metavar="PATH", help="a local transformers causal LM, vision-language or DiffusionGemma "
                                                   "model folder, or a causal LM's .gguf file (default: embedded SmolLM2)")
    p.add_argument("--image", metavar="PATH", help="with a vision-language --model: the image to ask about")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None, metavar="K")
    p.add_argument("--top-p", type=float, default=None, metavar="P")
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument("--option", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="decoder option, e.g. num_draft=6 (see suite.decoder_options); repeatable")
    p.add_argument("--json-schema", metavar="FILE", help="constrain the output to JSON valid under this JSON schema file")
    p.add_argument("--regex", metavar="PATTERN", help="constrain the output to match this regular expression")
    p.add_argument("--constraint-backend", default="auto", choices=["auto", "xgrammar", "llguidance"],
                   help="the grammar backend of --json-schema / --regex (default auto: the one that enforces every "
                        "keyword of the schema)")
    p.add_argument("--strict", action="store_true", help="--json-schema: objects take only the properties they "
                   "list (the closed form, as OpenAI's strict: true)")
    p.add_argument("--enforce-all", action="store_true", help="--json-schema: refuse a schema with keywords no "
                   "backend enforces (uniqueItems, not, ...) instead of enforcing the rest, validating the output "
                   "against all of it and naming them as relaxed (the default)")
    p.add_argument("--approximate", action="store_true", help=argparse.SUPPRESS)      # the default now
    p.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="end the answer before this text (repeat for up to 4; decoding stops there)")
    p.add_argument("--stream", action="store_true", help="print text as it is committed (single prompt)")
    p.add_argument("--compare", action="store_true",
                   help="also decode with ar: print the speedup over ar and whether the text equals ar's")
    p.add_argument("--input", metavar="FILE", help="prompts, one per line ('-' = stdin)")
    p.add_argument("--output", metavar="FILE.jsonl", help="write one JSON object per prompt here")
    p.add_argument("--threads", type=int, default=None, metavar="T", help="torch threads (default: torch's)")
    add_dtype_argument(p, default=None)
    p.add_argument("--runtime", default=None, choices=("torch", "llama.cpp"),
                   help="what runs a .gguf --model: llama.cpp (the file at its own type, through llama-cpp-python) "
                        "or torch (dequantised once to float32); default: llama.cpp where installed "
                        "(--engine chooses local or Ray batch workers)")
    p.add_argument("--compile", default=None, metavar="SETTING",
                   choices=("default", "freezing", "cpp_wrapper", "max-autotune"),
                   help="compiled decode steps with this inductor setting (suite.models.compiled; the first run "
                        "compiles for minutes, later runs reuse the on-disk cache; default: eager)")
    p.add_argument("--step", default=None, choices=("fixed", "free"),
                   help="fixed: every decode step the same width over a static cache (lossless decoders give ar's "
                        "tokens bitwise in bf16 too for chain drafts; --compile compiles that one step); free: each step as wide as "
                        "its draft (default: $PARASUITE_STEP, else fixed in bfloat16 and free in float32)")
    add_batch_arguments(p)
    args = p.parse_args(argv)
    prompt_after_options(args)
    if (args.prompt is None) == (args.input is None):
        p.error("give either a prompt or --input FILE (not both)")
    args.decoder = args.decoder or (VLM_DECODER if model_vlm(args.model) else
                                    CANVAS_DECODERS[0] if model_diffusion_gemma(args.model) else DEFAULT_DECODER)
    if args.stop and (model_vlm(args.model) or model_diffusion_gemma(args.model)):
        p.error("--stop works with causal language models (the embedded one, a transformers or GGUF model); "
                "drop it for this model")
    return args


def prompt_after_options(args: argparse.Namespace) -> None:
    """--option takes every word after it (nargs="+"), the prompt too: without a prompt before it (or
    --input), its last word is the prompt when it is no KEY=VALUE item."""
    if args.prompt is None and args.input is None and args.option and "=" not in args.option[-1]:
        args.prompt, args.option = args.option[-1], args.option[:-1]


def model_diffusion_gemma(model) -> bool:
    """Whether --model is a DiffusionGemma folder (its default decoder is the family's own sampler)."""
    from text.generator import model_type
    return model is not None and model_type(model) == "diffusion_gemma"


VLM_DECODER = "ar"      # a vision-language family runs no auto (text.vlm_chat.VLMChat.decoders)


def model_vlm(model) -> str | None:
    """--model's vision-language family (suite.models.vlm), None for a causal LM or the embedded model."""
    from text.generator import vlm_family
    return vlm_family(model) if model is not None else None


def check_image(args) -> None:
    """--image goes with a vision-language folder and one prompt, and such a folder needs it."""
    from suite.models.vlm import FAMILIES
    family = model_vlm(args.model)
    if args.image is None and family:
        raise ValueError(f"{args.model} holds a vision-language model ({family}): pass --image PATH, the image "
                         "to ask about")
    if args.image is not None and not family:
        raise ValueError(f"--image needs a vision-language --model folder ({', '.join(FAMILIES)}); "
                         f"{args.model or 'the embedded SmolLM2'} is a causal LM that reads no images: drop --image")
    if args.image is not None and (args.input is not None or args.output is not None or args.engine != "local"):
        raise ValueError("--image answers one prompt: pass the prompt itself, without --input, --output or --engine ray")


def read_image(path: str):
    """--image as an RGB PIL image; a missing or unreadable file is a ValueError naming it."""
    from PIL import Image, UnidentifiedImageError
    if not Path(path).is_file():
        raise ValueError(f"no image file {path!r}: pass an existing image (PNG, JPEG, ...) with --image")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"cannot read the image {path!r} ({type(e).__name__}): pass a PNG, JPEG or other "
                         "image file with --image") from None


def describe_registered(names) -> str:
    from suite.runtime.options import describe_decoders
    from suite.registry import REGISTRY
    return describe_decoders([n for n in names if n in REGISTRY])


def decoder_options(decoder: str, items: list[str]) -> dict:
    """--option items typed and checked once (suite.runtime.options), the operator's too (the command
    line's user runs the process: e.g. suffix's global_file); a bad one is a ValueError."""
    from suite import parse_option
    from suite.runtime.options import parse_options
    from suite.registry import REGISTRY
    if decoder in REGISTRY:
        return parse_options(decoder, items, operator=True)
    return dict(parse_option(o) for o in items)     # auto / eagle: checked when the model loads


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


class TextWorker:
    """The batch worker (suite.runtime.jobs): loads the model once, decodes one prompt per call into the
    JSON record of --output. Its calls run `concurrency` at a time and share forwards (the model's
    scheduler: prompts join the running batch and leave it as they finish)."""

    concurrency = 16

    def __init__(self, model=None, decoder=None, compare=False, threads=None, dtype=None, compile=None,
                 runtime=None, step=None, **kwargs):
        kwargs.setdefault("json_schema", None), kwargs.setdefault("regex", None)
        import text
        from text.generator import DEFAULT_DECODER
        self.gen = text.load(model, dtype=dtype, compile=compile, engine=runtime, step=step)
        decoder = decoder or DEFAULT_DECODER
        self.decoder, self.compare, self.kwargs = decoder, compare, kwargs

    def __call__(self, payload: dict) -> dict:
        prompt = payload["prompt"]
        res = self.gen.generate(prompt, decoder=self.decoder, **self.kwargs)
        record = {"prompt": prompt, "text": res.text, "token_ids": res.token_ids, "decoder": self.decoder,
                  "finish_reason": finish_reason(self.gen, prompt, res, self.kwargs), "stats": res.stats.as_dict()}
        if self.kwargs["json_schema"] is not None or self.kwargs["regex"] is not None:
            record["json"], record["parse_error"] = res.json, res.parse_error
            record["valid"], record["validation_errors"], record["relaxed"] = (res.valid, res.validation_errors,
                                                                               list(res.relaxed))
        if self.compare:
            record["compare"] = compared(res, self.gen.generate(prompt, decoder="ar", **common(self.kwargs)))
        return record


COMMON = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "chat", "json_schema", "regex", "constraint",
          "stop")


def read_schema(path: str | None):
    """--json-schema FILE as a dict; a missing file or one that is not a JSON object is a ValueError
    naming the fix (the schema itself is checked when it compiles, before any decoding)."""
    if path is None:
        return None
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"no JSON schema file {path!r}: pass an existing .json file with --json-schema")
    try:
        schema = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--json-schema {path!r} is not valid JSON ({e}): fix the file") from None
    if not isinstance(schema, dict):
        raise ValueError(f"--json-schema {path!r} holds a {type(schema).__name__}, not a JSON object: a JSON schema "
                         "is an object such as {\"type\": \"object\", \"properties\": {...}}")
    return schema


def check_constraint(args, schema) -> None:
    """--json-schema and --regex exclude each other and a vision-language --model; the schema or regex
    is checked here, before the model loads (suite.constraint.check)."""
    if schema is not None and args.regex is not None:
        raise ValueError("give --json-schema or --regex, not both: drop one of them")
    if args.regex is not None and not args.regex:
        raise ValueError("--regex is empty: pass a pattern, e.g. --regex '[0-9]+'")
    if (schema is not None or args.regex is not None) and (args.image is not None or model_vlm(args.model)):
        raise ValueError("--json-schema / --regex constrain causal LMs (text.load); drop them for a vision-language --model")
    if schema is not None or args.regex is not None:
        from suite.constraint import check
        check(schema, args.regex, **constraint_options(args))     # a bad schema or regex: exit 2 before the model loads


def constraint_options(args) -> dict:
    """--constraint-backend, --strict, --enforce-all as suite.constraint.check's options."""
    return {"backend": args.constraint_backend, "strict": args.strict, "approximate": not args.enforce_all}


def finish_reason(gen, prompt: str, res, kwargs: dict) -> str:
    """eos, stop (a --stop text), length (max_new_tokens reached) or context (the model's context filled first)."""
    if res.finish_reason == "length" and len(res.token_ids) < kwargs["max_new_tokens"] and gen.max_length:
        return "context"
    return res.finish_reason


def explain(record: dict, max_new_tokens: int) -> str:
    """The notes of one record's summary: a context stop, and with --compare the speedup over ar."""
    notes = []
    if record["finish_reason"] == "context":
        notes.append(f"stopped at the model's context limit after {len(record['token_ids'])} of "
                     f"{max_new_tokens} new tokens")
    cmp = record.get("compare")
    if cmp:
        notes.append(f"{cmp['speedup']:.2f}x vs ar ({cmp['ar_wall_time_s']:.2f} s, {cmp['ar_forwards']} forwards), "
                     + ("same text as ar" if cmp["same_as_ar"] else "text differs from ar"))
    return "; ".join(notes)


def total_stats(records: list[dict]):
    import suite
    total = suite.DecodeStats()
    for r in records:
        s = r["stats"]
        total.num_forwards += s["num_forwards"]
        total.num_draft_forwards += s["num_draft_forwards"]
        total.num_new_tokens += s["num_new_tokens"]
        total.wall_time_s += s["wall_time_s"]
    return total


def run(args: argparse.Namespace) -> int:
    options = decoder_options(args.decoder, args.option)
    check_image(args)
    if args.prompt is not None and not args.prompt.strip():
        raise ValueError("empty prompt: pass some text")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    prompts = read_prompts(args.input) if args.input is not None else [args.prompt]
    if args.output is not None:
        parent = Path(args.output).expanduser().resolve().parent
        if not parent.is_dir():
            raise FileNotFoundError(f"the folder of --output {args.output!r} does not exist: create it first")
    schema = read_schema(args.json_schema)
    check_constraint(args, schema)
    kwargs = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                  top_p=args.top_p, seed=args.seed, chat=args.chat, **options)
    if schema is not None or args.regex is not None:
        kwargs.update(json_schema=schema, regex=args.regex, constraint=constraint_options(args))
    if args.stop:
        from text.row_text import check_stops
        kwargs["stop"] = check_stops(args.stop)
    if args.input is None and args.output is None and args.engine == "local":
        return run_one(args, kwargs, read_image(args.image) if args.image else None)
    return run_many(args, prompts, kwargs)


def run_one(args, kwargs, image=None) -> int:
    import text
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    gen = text.load(args.model, dtype=args.dtype, compile=args.compile, engine=args.runtime, step=args.step)
    if image is not None:
        return summarise(args, *answer_image(gen, args, kwargs, image))
    gen.decoder(args.decoder, **{k: v for k, v in kwargs.items() if k not in COMMON})  # bad options: before decoding
    gen.grammar(kwargs.get("json_schema"), kwargs.get("regex"), **kwargs.get("constraint", {}))  # bad: before decoding
    if args.stream:
        s = gen.stream(args.prompt, decoder=args.decoder, **kwargs)
        for chunk in s:
            print(chunk, end="", flush=True)
        print()
        res = s
    else:
        res = gen.generate(args.prompt, decoder=args.decoder, **kwargs)
        print(res.text)
    ar = gen.generate(args.prompt, decoder="ar", **common(kwargs)) if args.compare else None
    if res.parse_error:
        print(f"note: the output does not parse: {res.parse_error}", file=sys.stderr)
    elif res.valid is False:
        print(f"note: the output is NOT valid under the schema: {'; '.join(res.validation_errors)}", file=sys.stderr)
    elif res.valid:
        print("note: the output is valid under the " + ("schema" if kwargs.get("json_schema") else "regex"),
              file=sys.stderr)
    if getattr(res, "relaxed", ()):
        print(f"note: not enforced while generating (the output is checked against them): {', '.join(res.relaxed)}",
              file=sys.stderr)
    return summarise(args, res, finish_reason(gen, args.prompt, res, kwargs), ar)


def answer_image(gen, args, kwargs, image):
    """A vision-language folder's answer about --image (text.vlm_chat.VLMChat, printed whole): the
    result, its finish reason, and ar's result for --compare (else None)."""
    family = gen.vlm.family
    if args.decoder not in gen.decoders:
        raise ValueError(f"decoder {args.decoder!r} does not run on {family}; use one of: {', '.join(gen.decoders)}")
    kwargs = {k: v for k, v in kwargs.items() if k != "chat"}     # the family's own prompt format (VLMChat.prompt)
    res = gen.generate(args.prompt, image=image, decoder=args.decoder, **kwargs)
    print(res.text)
    reason = "eos" if res.tokens and res.tokens[-1] in gen.vlm.eos else "length"
    ar = gen.generate(args.prompt, image=image, decoder="ar", **common(kwargs)) if args.compare else None
    return res, reason, ar


def common(kwargs: dict) -> dict:
    """The request's settings without the decoder's options (what the ar baseline takes)."""
    return {k: v for k, v in kwargs.items() if k in COMMON}


def token_ids(res) -> list[int]:
    """A result's new tokens: a TextResult's token_ids, or a VLM's ChatResult.tokens."""
    return res.token_ids if hasattr(res, "token_ids") else res.tokens


def compared(res, ar) -> dict:
    """--compare's record: ar's time and forwards, the speedup over ar, and whether the tokens are ar's."""
    return {"ar_wall_time_s": ar.stats.wall_time_s, "ar_forwards": ar.stats.num_forwards,
            "speedup": ar.stats.wall_time_s / max(res.stats.wall_time_s, 1e-9),
            "same_as_ar": token_ids(ar) == token_ids(res)}


def summarise(args, res, reason: str, ar=None) -> int:
    """The one-line summary on stderr: stats, the decoder's guarantee, and the notes (explain)."""
    record = {"token_ids": token_ids(res), "finish_reason": reason}
    if ar is not None:
        record["compare"] = compared(res, ar)
    from suite.runtime.options import decoders_used, guarantee_note
    note = "; ".join(filter(None, (res.stats.summary(), guarantee_note(args.decoder), decoders_used(res.stats),
                                   explain(record, args.max_new_tokens))))
    print(note, file=sys.stderr)
    return 0


def run_many(args, prompts: list[str], kwargs) -> int:
    """--input (or --engine ray): one suite.runtime.jobs job; records in prompt order, to --output
    (assembled from per-prompt parts, so an interrupted job resumes) or to stdout."""
    from suite.runtime.jobs.cli import engine_from_args
    from suite.runtime.jobs.items import BatchJob, Item
    from suite.runtime.jobs.run import run_batch
    from suite.runtime.storage import write_json, write_text

    engine = engine_from_args(args, threads=args.threads)
    records: dict[str, dict] = {}
    target = Path(args.output).expanduser() if args.output else None
    parts = target.with_name(f".{target.name}.parts") if target else None
    if parts:
        parts.mkdir(exist_ok=True)

    def write(item, record) -> None:
        records[item.key] = record
        if parts:
            write_json(item.outputs[0], record, indent=None)
        else:
            print(json.dumps(record, ensure_ascii=False), flush=True)

    width = len(str(len(prompts)))
    items = [Item(f"prompt {i + 1:0{width}d}", {"prompt": p}, (parts / f"{i:08d}.json",) if parts else ())
             for i, p in enumerate(prompts)]
    if parts:
        restore_parts(target, items)
    worker_args = {"model": args.model, "decoder": args.decoder, "compare": args.compare, "threads": args.threads,
                   "dtype": args.dtype, "compile": args.compile, "runtime": args.runtime,
                   "step": args.step, **kwargs}
    job = BatchJob("text", items, TextWorker, worker_args, write, unit="prompt", ordered=parts is None,
                   fields=("prompt", "text", "token_ids", "decoder", "finish_reason", "stats"),
                   manifest=target.with_name(target.name + ".manifest.jsonl") if target else None)
    summary = run_batch(job, engine)
    if target:
        for o in summary.outcomes:
            if o.status == "skipped":
                records[o.item.key] = json.loads(o.item.outputs[0].read_text(encoding="utf-8"))
        lines = [json.dumps(records[it.key], ensure_ascii=False) + "\n" for it in items if it.key in records]
        if not (target.is_file() and all(o.status == "skipped" for o in summary.outcomes)):
            write_text(target, "".join(lines))       # a rerun with nothing to do leaves the output alone
        if not summary.failed:
            shutil.rmtree(parts)
    done = [records[it.key] for it in items if it.key in records]
    notes = [f"{it.key}: {explain(records[it.key], args.max_new_tokens)}" for it in items
             if it.key in records and explain(records[it.key], args.max_new_tokens)]
    for note in notes:
        print(note, file=sys.stderr)
    where = f" -> {args.output}" if args.output else ""
    ran = [records[o.item.key] for o in summary.outcomes if o.status == "ok"]
    print(job_line(len(done), ran, summary, where, args.decoder), file=sys.stderr)
    if args.compare and done:
        ar_s = sum(r["compare"]["ar_wall_time_s"] for r in done)
        same = sum(r["compare"]["same_as_ar"] for r in done)
        print(f"compare: {ar_s / max(total_stats(done).wall_time_s, 1e-9):.2f}x vs ar over {len(done)} prompts, "
              f"{same} of {len(done)} the same text as ar", file=sys.stderr)
    print(summary.line(), file=sys.stderr)
    return summary.exit_code


def job_line(done: int, ran: list[dict], summary, where: str, decoder: str) -> str:
    """The job's summary line: tokens, forwards and speed of the prompts decoded in this run only (a resumed
    job's skipped prompts were decoded by an earlier run: their tokens are not this run's)."""
    from suite.runtime.options import guarantee_note
    skipped = summary.count("skipped")
    before = f", {skipped} done by an earlier run (skipped)" if skipped else ""
    if not ran:
        return (f"{done} prompts{where}{before}: none decoded in this run ({summary.seconds:.1f} s); "
                f"{guarantee_note(decoder)}")
    total = total_stats(ran)      # prompts share forwards: their own counts add up to more than the job ran
    return (f"{done} prompts{where}{before}: {total.num_new_tokens} tokens decoded in this run, "
            f"{total.tokens_per_forward:.2f} per prompt's forward ({total.num_forwards} in all, shared in batches), "
            f"{summary.seconds:.1f} s for the job, loading included "
            f"({total.num_new_tokens / max(summary.seconds, 1e-9):.1f} tok/s); {guarantee_note(decoder)}")


def restore_parts(target: Path, items) -> None:
    """A finished job removed its per-prompt parts; its records live on in `target`. Put back the part
    of each prompt whose record is there, so the manifest's rule (done, outputs present) skips it on
    a rerun (a prompt given twice takes its records in order)."""
    from suite.runtime.storage import write_text
    if not target.is_file():
        return
    kept: dict[str, list[str]] = {}
    for line in target.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            return                              # not this CLI's output: every prompt runs again
        if isinstance(record, dict) and isinstance(record.get("prompt"), str):
            kept.setdefault(record["prompt"], []).append(line)
    for item in items:
        part, same = item.outputs[0], kept.get(item.payload["prompt"])
        if same:
            line = same.pop(0)
            if not part.exists():
                write_text(part, line)


def main(argv=None) -> int:
    from suite.runtime.jobs.cli import cli_exit
    args = parse_args(argv)
    return cli_exit(lambda: run(args), "prompts")


if __name__ == "__main__":
    sys.exit(main())
