"""`python -m text.build_corpus`: the default static corpus of `sam_decoding` for the embedded SmolLM2
(text/weights/sam_corpus/corpus.txt), built offline from material on this machine.

SAM-Decoding drafts from a suffix automaton over a corpus of text like the text the model writes.
The default is the model's own writing: SmolLM2-135M-Instruct's greedy answers to chat prompts
(text/draft_prompts.py's instruction templates x subjects) and its completions of documented
Python standard-library functions (their `def` line and docstring), separated by blank lines.
Prompts whose source (subject or module) is in the EAGLE head's held-out share, and subjects named
in the bench's own prompts (text/prompts.py), are left out, so no benchmarked prompt's answer is
in the corpus. A few hundred KB at most (--max-kb).

A user's own corpus is any text file or folder: `gen.generate(..., decoder="sam_decoding",
corpus="my_outputs/")`.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

OUT = Path(__file__).parent / "weights" / "sam_corpus" / "corpus.txt"


def corpus_prompts(n_chat: int, n_code: int, seed: int = 0) -> list[dict]:
    from .draft_prompts import build_prompts, held_out
    from .prompts import CHAT, CODE, GROUNDED
    bench = " ".join(CHAT + CODE + GROUNDED).lower()
    rng = random.Random(seed)
    out = []
    for kind, n in (("chat", n_chat), ("code", n_code)):
        pool = [p for p in build_prompts() if p.kind == kind and not held_out(p.source)
                and not (p.source.startswith("subject:") and p.source[8:].lower() in bench)]
        rng.shuffle(pool)
        out += [p.as_dict() for p in pool[:n]]
    return out


@torch.no_grad()
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m text.build_corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chat", type=int, default=160, help="chat prompts")
    p.add_argument("--code", type=int, default=64, help="code completion prompts")
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-kb", type=int, default=300)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    import text
    from .train_draft import encode
    gen = text.load()
    tok, model = gen.tokenizer, gen.model
    eos = model.config.eos_token_id
    prompts = corpus_prompts(args.chat, args.code)
    encoded = sorted(((encode(tok, q), q) for q in prompts), key=lambda e: len(e[0]))
    pieces, t0 = [], time.time()
    for i in tqdm(range(0, len(encoded), args.batch), desc="corpus", file=sys.stderr):
        group = encoded[i:i + args.batch]
        width = max(len(r) for r, _ in group)
        ids = torch.tensor([[eos] * (width - len(r)) + r for r, _ in group])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r, _ in group])
        out = model.generate(ids, attention_mask=mask, max_new_tokens=args.max_new_tokens, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos)
        for row, (_, q) in zip(out[:, width:].tolist(), group):
            answer = tok.decode(row, skip_special_tokens=True).strip()
            pieces.append((q["text"] + answer) if q["kind"] == "code" else answer)
    text_out = "\n\n".join(x for x in pieces if x)
    text_out = text_out.encode()[:args.max_kb * 1024].decode(errors="ignore")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text_out)
    tmp.replace(args.out)
    print(f"wrote {args.out}: {len(pieces)} pieces, {len(text_out.encode()) // 1024} KB in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
