"""Compliance of the compiled grammars with JSON Schema, model-free, on the JSONSchemaBench sample
(tests/data/jsonschemabench: real-world schemas with valid and invalid test instances).

For each schema: compile it (suite.constraint.Compiler, the backend chosen as for a request), then feed
each test instance as the model would write it (json.dumps with ", " and ": ", its tokens by the
tokenizer, then EOS) through a fresh matcher: the grammar accepts the instance iff every token is
accepted and the matcher ends. Prints per split: schemas compiled, refused (no backend enforces them,
or unsatisfiable/over budget), compiled with a stated relaxation (the default; --enforce-all refuses them), valid instances
rejected, invalid instances accepted (by grammars without a stated relaxation: the weakened ones). An
instance whose label the result check (suite/constraints/validate.py) does not share is left out and
counted ("labels differ").

  python scripts/schema_compliance.py [--backend auto|xgrammar|llguidance] [--enforce-all] [--strict]
  python scripts/schema_compliance.py --generate 10    # instead: SmolLM2 writes a document for 10 schemas

--generate N: the embedded SmolLM2 (greedy, chat) asked for a document under each of N small compiled
schemas across the splits, by constrained `ar` and by the default decoder: whether their tokens are equal,
how many outputs are complete and valid (the result check), and the default decoder's tokens/s over ar's.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "jsonschemabench" / "sample.jsonl"


def load_sample(path=SAMPLE) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def document(data) -> str:
    """An instance as the grammars write JSON: separators ", " and ": ", no other whitespace."""
    return json.dumps(data, ensure_ascii=False)


def accepts(grammar, tokens: list[int], stop: int) -> bool:
    m = grammar.matcher()
    for t in tokens + [stop]:
        if not m.accept_token(t):
            return False
    return m.is_terminated()


def run(records, compiler, backend="auto", approximate=True, strict=False, verbose=False) -> dict:
    from suite.constraint import ConstraintError
    from suite.constraints.validate import errors
    stop = compiler.stop[0]
    splits = collections.defaultdict(collections.Counter)
    for rec in records:
        c = splits[rec["split"]]
        c["schemas"] += 1
        try:
            g = compiler.compile(json_schema=rec["schema"], backend=backend, approximate=approximate, strict=strict)
        except ConstraintError as e:
            c["refused"] += 1
            if verbose:
                print(f"refused {rec['split']}/{rec['name']}: {str(e)[:200]}", file=sys.stderr)
            continue
        c["compiled"] += 1
        c["backend:" + g.backend] += 1
        c["relaxed"] += bool(g.relaxed)
        for t in rec["tests"]:
            if (not errors(rec["schema"], t["data"])) != t["valid"]:      # our validator reads it otherwise
                c["label_differs"] += 1
                continue
            ok = accepts(g, compiler._encode(document(t["data"])), stop)
            kind = "valid" if t["valid"] else "invalid"
            c[kind] += 1
            c[kind + "_accepted"] += ok
            if not t["valid"] and ok and not g.relaxed:
                c["weakened"] += 1
                if verbose:
                    print(f"accepted invalid {rec['split']}/{rec['name']} ({g.backend}): {document(t['data'])[:150]}",
                          file=sys.stderr)
            if t["valid"] and not ok and verbose:
                print(f"rejected valid {rec['split']}/{rec['name']} ({g.backend}): {document(t['data'])[:150]}",
                      file=sys.stderr)
    return splits


def generate(records, gen, count: int, max_new_tokens: int = 96) -> str:
    """The short generation run (--generate): per schema, constrained ar then the default decoder."""
    from suite.constraint import ConstraintError
    from text.generator import DEFAULT_DECODER
    small = [r for r in records if len(json.dumps(r["schema"])) <= 1500]
    picked = small[::max(1, len(small) // count)][:count]
    totals = collections.Counter()
    for rec in picked:
        prompt = "Write one JSON document valid under this JSON schema.\nSchema: " + json.dumps(rec["schema"])
        runs = {}
        try:
            for decoder in ("ar", DEFAULT_DECODER):
                t0 = time.perf_counter()
                res = gen.generate(prompt, decoder=decoder, chat=True, max_new_tokens=max_new_tokens,
                                   json_schema=rec["schema"])
                runs[decoder] = (res, time.perf_counter() - t0)
        except ConstraintError:
            totals["refused"] += 1
            continue
        (ar, ar_s), (dd, dd_s) = runs["ar"], runs[DEFAULT_DECODER]
        totals["schemas"] += 1
        totals["equal"] += ar.token_ids == dd.token_ids
        totals["valid"] += bool(dd.valid)
        totals["complete"] += dd.parse_error is None
        totals["ar_tokens"] += len(ar.token_ids)
        totals["ar_s"] += ar_s
        totals["tokens"] += len(dd.token_ids)
        totals["s"] += dd_s
        totals["ar_forwards"] += ar.stats.num_forwards
        totals["forwards"] += dd.stats.num_forwards
    t = totals
    return (f"{t['schemas']} schemas ({t['refused']} refused), max_new_tokens={max_new_tokens}: {DEFAULT_DECODER} "
            f"tokens = constrained ar's on {t['equal']}/{t['schemas']}; complete JSON {t['complete']}, valid "
            f"{t['valid']}; forwards {t['forwards'] / max(t['ar_forwards'], 1):.2f}x ar's; tokens/s "
            f"{(t['tokens'] / max(t['s'], 1e-9)) / (t['ar_tokens'] / max(t['ar_s'], 1e-9)):.2f}x ar's")


def table(splits) -> str:
    rows = ["| split | schemas | compiled | xgrammar / llguidance | relaxed | valid rejected | invalid accepted "
            "(unstated) | labels differ |", "|---|---|---|---|---|---|---|---|"]
    total = collections.Counter()
    for name, c in list(splits.items()) + [("all", None)]:
        if c is None:
            c = total
        else:
            total.update(c)
        rows.append(f"| {name} | {c['schemas']} | {c['compiled']} ({c['compiled'] / max(c['schemas'], 1):.0%}) | "
                    f"{c['backend:xgrammar']} / {c['backend:llguidance']} | {c['relaxed']} | "
                    f"{c['valid'] - c['valid_accepted']}/{c['valid']} "
                    f"({(c['valid'] - c['valid_accepted']) / max(c['valid'], 1):.1%}) | "
                    f"{c['invalid_accepted']}/{c['invalid']} ({c['weakened']}) | {c['label_differs']} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto", choices=["auto", "xgrammar", "llguidance"])
    p.add_argument("--enforce-all", action="store_true", help="refuse schemas with keywords no backend enforces")
    p.add_argument("--strict", action="store_true")
    p.add_argument("--limit", type=int, default=None, help="the first N schemas only")
    p.add_argument("--generate", type=int, default=0, metavar="N", help="instead: the short generation run on N schemas")
    p.add_argument("--verbose", action="store_true", help="each refusal, rejected valid and accepted invalid instance")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from transformers import AutoTokenizer

    from suite.constraint import Compiler
    from text.model import ensure_converted
    if args.generate:
        import text
        t0 = time.perf_counter()
        print(generate(load_sample()[:args.limit], text.load(), args.generate))
        print(f"{time.perf_counter() - t0:.0f} s (a shared, loaded CPU: ratios only)")
        return 0
    tok = AutoTokenizer.from_pretrained(str(ensure_converted(progress=False)), local_files_only=True)
    compiler = Compiler(tok, len(tok), [tok.convert_tokens_to_ids("<|im_end|>")])
    records = load_sample()[:args.limit]
    t0 = time.perf_counter()
    splits = run(records, compiler, args.backend, not args.enforce_all, args.strict, args.verbose)
    print(table(splits))
    print(f"\n{len(records)} schemas, backend={args.backend}, approximate={not args.enforce_all}, strict={args.strict}, "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
