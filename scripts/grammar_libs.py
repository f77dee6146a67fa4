"""Compare the grammar libraries the registry offers for suite.constraint (issue 37) on this machine:
compile time of a JSON schema against SmolLM2's tokenizer and the time of one next-token mask,
walking a valid output token by token. Run: .venv/bin/python scripts/grammar_libs.py
(xgrammar, llguidance and outlines-core must be installed: pip install --no-deps <pkg>==<ver>)."""
from __future__ import annotations

import json
import statistics
import time

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "role": {"enum": ["engineer", "manager", "designer"]},
        "skills": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city", "zip"]},
    },
    "required": ["name", "age", "role", "skills", "address"],
}
OUTPUT = json.dumps({"name": "Ada Lovelace", "age": 36, "role": "engineer", "skills": ["math", "poetry"],
                     "address": {"city": "London", "zip": "W1"}})


def timed(fn, repeat=1):
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best.append(time.perf_counter() - t0)
    return out, min(best)


def main():
    import torch
    from transformers import AutoTokenizer

    from text.model import ensure_converted
    tok = AutoTokenizer.from_pretrained(str(ensure_converted()), local_files_only=True)
    vocab = len(tok)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    ids = tok(OUTPUT, add_special_tokens=False)["input_ids"] + [eos]
    schema = json.dumps(SCHEMA)
    rows = []

    import xgrammar as xgr
    info, t_tok = timed(lambda: xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab, stop_token_ids=[eos]))
    comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    cg, t_comp = timed(lambda: comp.compile_json_schema(schema, any_whitespace=False), 3)
    m = xgr.GrammarMatcher(cg)
    bm = xgr.allocate_token_bitmask(1, vocab)
    times = []
    for t in ids:
        t0 = time.perf_counter(); m.fill_next_token_bitmask(bm, 0); times.append(time.perf_counter() - t0)
        assert m.accept_token(t), t
    rows.append(("xgrammar 0.2.9", t_tok, t_comp, times, m.is_terminated()))

    import llguidance
    import llguidance.hf
    import llguidance.torch
    lt, t_tok = timed(lambda: llguidance.hf.from_tokenizer(tok, n_vocab=vocab, eos_token=eos))
    grm = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
    lm, t_comp = timed(lambda: llguidance.LLMatcher(lt, grm), 3)
    bm = llguidance.torch.allocate_token_bitmask(1, vocab)
    times = []
    for t in ids:
        t0 = time.perf_counter(); llguidance.torch.fill_next_token_bitmask(lm, bm, 0); times.append(time.perf_counter() - t0)
        assert lm.consume_token(t), (t, lm.get_error())
    rows.append(("llguidance 1.9.1", t_tok, t_comp, times, lm.is_stopped() or lm.is_accepting()))

    import outlines_core
    from outlines_core.json_schema import build_regex_from_schema
    byte_of = {v: k for k, v in _bytes_to_unicode().items()}
    special = set(tok.all_special_ids)

    def build_vocab():
        table: dict[bytes, list[int]] = {}
        for piece, i in tok.get_vocab().items():
            if i == eos or i in special:
                continue
            table.setdefault(bytes(byte_of[c] for c in piece), []).append(i)
        return outlines_core.Vocabulary(eos, table)
    ov, t_tok = timed(build_vocab)
    regex = build_regex_from_schema(schema)
    index, t_comp = timed(lambda: outlines_core.Index(regex, ov), 1)
    g = outlines_core.Guide(index)
    mask = torch.zeros((vocab + 31) // 32, dtype=torch.int32)
    times = []
    for t in ids[:-1]:
        t0 = time.perf_counter(); g.write_mask_into(mask.data_ptr(), mask.numel(), 4); times.append(time.perf_counter() - t0)
        g.advance(t)
    rows.append(("outlines-core 0.2.14", t_tok, t_comp, times, g.is_finished()))

    print(f"SmolLM2 tokenizer ({vocab} tokens), one JSON schema (nested object, array, enum), a {len(ids)}-token output")
    print("| library | tokenizer setup (s) | schema compile (ms) | mask per step: median / max (us) | accepts output |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, tt, tc, ts, ok in rows:
        print(f"| {name} | {tt:.2f} | {tc * 1e3:.1f} | {statistics.median(ts) * 1e6:.0f} / {max(ts) * 1e6:.0f} | {ok} |")


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, map(chr, cs)))


if __name__ == "__main__":
    main()
