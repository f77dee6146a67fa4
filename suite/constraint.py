"""Structured output: a request's rows constrained by a JSON schema or a regex (issue 37).

`Compiler(tokenizer, vocab_size, eos_token_ids)` compiles a schema or a regex once into a `Grammar`
(xgrammar 0.2.9: a token-level automaton over the model's vocabulary; chosen over llguidance and
outlines-core by compile time and per-step mask time on this CPU, see BENCHMARKS.md). A Grammar
makes one `RowConstraint` per row: the row's matcher, advanced by every committed token. Requests
carry them in `RequestInputs.constraints` (one per row, None for a free row), so they move with
their rows (`DecodeState.select` / `extend`, the scheduler).

The decode loop (suite/loop.py) applies them in one place (suite/structured.py), for every decoder:
  * masking (`structured.mask_logits`): after the forward, every scored slot whose tokens are a continuation of the
    row's committed text (the chain or tree path that leads to it, tentatively walked through the
    matcher and rolled back) gets its logits masked to the tokens the grammar allows there (EOS
    only where the grammar accepts). Target and draft distributions are then processed the same
    way by `logits_to_probs`, so a lossless rule stays lossless with respect to the constrained
    distribution (greedy: token for token equal to constrained `ar`). A draft token the grammar
    rejects has probability 0 and is never accepted.
  * following (`structured.follow`): the committed tokens advance each row's matcher; then, where the grammar allows a
    single token, it is committed at once without a forward (its constrained probability is 1).
  * forced spans (`structured.forced_spans`): where every live row's grammar forces a string (`{"name": "`, `", "age": `, an enum's tail),
    its tokens (the tokenizer's own encoding of it, checked against the grammar) are drafted as
    point masses and verified in one forward (greedy prefix, or the speculative rule when sampling),
    with the token after them: the span costs one forward instead of one a token. That step is the
    loop's own (the decoder drafts nothing after the span; eagle still sees the kept features).
Drafters mask their own q the same way (`RowConstraint.masked`: speculative's draft model;
`draft_masks`: eagle's draft tree).
The tokens committed by the last two are counted in `stats.num_forced_tokens`; the time spent in
the grammar in `stats.mask_time_s`.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

import torch

class ConstraintError(ValueError):
    """A schema or regex that cannot constrain generation (what is wrong and how to fix it)."""


@dataclass(frozen=True)
class Grammar:
    """A compiled JSON schema or regex over one tokenizer's vocabulary, shared by the rows of
    every request that uses it (immutable)."""
    kind: str                   # "json_schema" or "regex"
    source: str                 # the schema as JSON text, or the regex
    compiled: Any               # xgrammar.CompiledGrammar
    vocab_size: int             # the model's logits width
    encode: Any = None          # text -> token ids (the tokenizer's own encoding), for forced spans

    @property
    def schema(self) -> dict | None:
        return json.loads(self.source) if self.kind == "json_schema" else None

    def row(self, forced: bool = True) -> "RowConstraint":
        """A fresh matcher for one row. forced: commit single allowed tokens without a forward and
        draft forced spans (off: one token per forward, as the constrained `ar` baseline)."""
        return RowConstraint(self, forced)

    def rows(self, batch: int, forced: bool = True) -> tuple["RowConstraint", ...]:
        return tuple(self.row(forced) for _ in range(batch))

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(the parsed JSON object, None) or (None, why it does not parse); for a regex, (text, None)
        when the whole text matches."""
        if self.kind == "regex":
            try:
                ok = re.fullmatch(self.source, text, re.DOTALL) is not None
            except re.error:            # a pattern Python's re reads differently: the grammar decides
                ok = True
            return (text, None) if ok else (None, "the text does not match the regex (cut by max_new_tokens?)")
        try:
            return json.loads(text), None
        except json.JSONDecodeError as e:
            return None, f"not complete JSON ({e.msg} at char {e.pos}): raise max_new_tokens"


class Compiler:
    """Compiles schemas and regexes against one tokenizer (its vocabulary read once), caching them."""

    def __init__(self, tokenizer, vocab_size: int | None = None, eos_token_ids=()):
        import xgrammar as xgr
        self.vocab_size = int(vocab_size or len(tokenizer))
        stop = sorted(set(eos_token_ids) or {tokenizer.eos_token_id})
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size, stop_token_ids=stop)
        self._compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self._encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
        self._lock = threading.Lock()

    def compile(self, json_schema: dict | str | None = None, regex: str | None = None) -> Grammar:
        """A Grammar from exactly one of a JSON schema (a dict, or its JSON text) or a regex;
        ConstraintError naming the fix otherwise."""
        kind, source, ebnf = check(json_schema, regex)
        with self._lock:
            try:
                compiled = self._compiler.compile_grammar(ebnf)
            except RuntimeError as e:
                raise ConstraintError(f"cannot compile this {kind.replace('_', ' ')}: {_reason(e)}") from e
        return Grammar(kind, source, compiled, self.vocab_size, self._encode)


def check(json_schema: dict | str | None = None, regex: str | None = None) -> tuple[str, str, str]:
    """Check a request's constraint without a tokenizer (a CLI does it before loading the model):
    (kind, source, its EBNF grammar); ConstraintError naming the fix for a bad schema or regex,
    neither or both."""
    import xgrammar as xgr
    if (json_schema is None) == (regex is None):
        raise ConstraintError("give exactly one of json_schema= (a JSON schema: dict or JSON text) and "
                              "regex= (a pattern)" + ("; drop one of them" if json_schema is not None else ""))
    if regex is not None:
        if not isinstance(regex, str) or not regex:
            raise ConstraintError(f"regex must be a non-empty str, got {regex!r}")
        try:
            return "regex", regex, str(xgr.Grammar.from_regex(regex))
        except RuntimeError as e:
            raise ConstraintError(f"invalid regex {regex!r}: {_reason(e)}; fix the pattern") from e
    source = _schema_text(json_schema)
    try:
        return "json_schema", source, json_grammar(source)
    except RuntimeError as e:
        raise ConstraintError(f"cannot use this JSON schema: {_reason(e)}; fix the schema (supported: object, array, "
                              "string, integer, number, boolean, null, enum, const, anyOf, $ref)") from e


# xgrammar 0.2.9 writes the characters of a length-bounded string as [^"\\\r\n]: raw control characters
# (a tab) pass, which JSON forbids (json.loads rejects them). Its unbounded strings exclude them already.
_LOOSE_CHARS = '[^\\"\\\\\\r\\n]'
_JSON_CHARS = '[^\\0-\\x1f\\"\\\\]'


def json_grammar(schema_text: str) -> str:
    """The EBNF grammar of a JSON schema (compact separators ", " and ": ", no free whitespace), its
    strings free of raw control characters."""
    import xgrammar as xgr
    return str(xgr.Grammar.from_json_schema(schema_text, any_whitespace=False)).replace(_LOOSE_CHARS, _JSON_CHARS)


def _schema_text(schema) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ConstraintError(f"the JSON schema is not valid JSON ({e.msg}, line {e.lineno} column {e.colno}): "
                                  "pass a JSON object such as {\"type\": \"object\", \"properties\": {...}}") from e
    if isinstance(schema, bool):
        raise ConstraintError("a boolean schema constrains nothing useful: pass a JSON object schema")
    if not isinstance(schema, dict):
        raise ConstraintError(f"a JSON schema is a JSON object (dict), got {type(schema).__name__}: pass e.g. "
                              "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}}")
    try:
        from jsonschema.exceptions import SchemaError
        from jsonschema.validators import validator_for
        validator_for(schema).check_schema(schema)
    except ImportError:         # jsonschema absent: the grammar compiler checks what it reads
        pass
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the top level"
        raise ConstraintError(f"invalid JSON schema at {where}: {e.message}; fix the schema") from e
    return json.dumps(schema)


def _reason(e: BaseException) -> str:
    """xgrammar's message without its source location prefix."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", text)


class RowConstraint:
    """One row's matcher: advanced by the row's committed tokens; draft paths are walked
    tentatively and rolled back."""

    def __init__(self, grammar: Grammar, forced: bool = True):
        import xgrammar as xgr
        self.grammar, self.forced = grammar, forced
        self.matcher = xgr.GrammarMatcher(grammar.compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, grammar.vocab_size)
        self.failed: str | None = None

    @property
    def finished(self) -> bool:
        return self.matcher.is_terminated()

    def accept(self, tokens: list[int]) -> None:
        """Advance by committed tokens; RuntimeError if the grammar rejects one (a decoder bug)."""
        for t in tokens:
            if self.matcher.is_terminated():
                return
            if not self.matcher.accept_token(int(t)):
                self.failed = f"token {t} committed against the grammar"
                raise RuntimeError(f"a decoder committed token {t}, which the grammar does not allow: "
                                   "report this (every text decoder masks its logits through suite.constraint)")

    def allowed_bits(self, out: torch.Tensor | None = None, index: int = 0) -> torch.Tensor:
        """The (W,) int32 bitmask of the tokens allowed next (into row `index` of `out` if given)."""
        if out is None:
            out, index = self._bitmask, 0
        self.matcher.fill_next_token_bitmask(out, index)
        return out[index]

    def single(self) -> int | None:
        """The one token the grammar allows next, or None (several, or the row has finished)."""
        if self.matcher.is_terminated():
            return None
        import numpy as np
        bits = self.allowed_bits().numpy().view(np.uint32)
        if int(np.bitwise_count(bits).sum()) != 1:
            return None
        word = int(np.flatnonzero(bits)[0])
        return word * 32 + int(bits[word]).bit_length() - 1

    def span(self, limit: int) -> list[int]:
        """Tokens of the string the grammar forces next (the tokenizer's encoding, its last token left
        out as it may merge with what follows, cut where the grammar rejects one), at most `limit`."""
        if limit <= 0 or self.matcher.is_terminated():
            return []
        text = self.matcher.find_jump_forward_string()
        if not text:
            return []
        encode = self.grammar.encode
        tokens = encode(text)[:-1] if encode is not None else self.matcher.find_jump_forward_tokens()
        good = []
        for t in tokens[:limit]:
            if not self.matcher.accept_token(int(t)):
                break
            good.append(int(t))
        if good:
            self.matcher.rollback(len(good))
        return good

    def masked(self, logits: torch.Tensor, path: list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        """(V,) logits after the committed text and `path` (a draft's tokens so far) with what the grammar
        forbids there at -inf (a copy; the logits as they are where the path leaves the grammar): how a
        drafter masks its own distribution q the way the loop masks the target's p."""
        bits = torch.full((1, (logits.shape[-1] + 31) // 32), -1,
                          dtype=torch.int32)  # host: xgrammar fills its bitmask on the CPU
        if not self.path_masks([tuple(path)], bits, [0])[0]:
            return logits
        out = logits.detach().clone()[None]
        apply_masks(out[None], bits, [0])
        return out[0]

    def path_masks(self, paths: list[tuple[int, ...]], out: torch.Tensor, rows: list[int]) -> list[bool]:
        """Fill out[rows[k]] with the bitmask after walking paths[k] (draft tokens after the committed
        text) for each k; False where a path leaves the grammar (or passes its end: no mask). The
        matcher is back at the committed text afterwards."""
        order = sorted(range(len(paths)), key=lambda k: paths[k])   # a depth-first walk of the draft tree
        stack: list[int] = []          # tokens tentatively accepted
        dead: tuple | None = None      # a prefix that leaves the grammar: every path under it is unmasked
        ok = [False] * len(paths)
        m = self.matcher
        for k in order:
            path = tuple(int(t) for t in paths[k])
            if dead is not None and path[:len(dead)] == dead:
                continue
            common = 0
            while common < min(len(stack), len(path)) and stack[common] == path[common]:
                common += 1
            if len(stack) > common:
                m.rollback(len(stack) - common)
                del stack[common:]
            for t in path[len(stack):]:
                if m.is_terminated() or not m.accept_token(t):
                    dead = path[:len(stack) + 1]
                    break
                stack.append(t)
            if len(stack) == len(path) and not m.is_terminated():
                m.fill_next_token_bitmask(out, rows[k])
                ok[k] = True
        if stack:
            m.rollback(len(stack))
        return ok


def draft_masks(constraints, rows: list[int], paths: list[list[tuple]], vocab_ids: torch.Tensor) -> torch.Tensor | None:
    """(R, n, K) bool: which of a draft head's K tokens (`vocab_ids`, target ids) each row's grammar allows
    after each of its n paths (draft tokens after the committed text); None when no row is constrained.
    A path that leaves the grammar, or after which the grammar allows none of the K, is left all True."""
    if constraints is None or all(constraints[b] is None or constraints[b].finished for b in rows):
        return None
    n = len(paths[0])
    vocab = next(constraints[b].grammar.vocab_size for b in rows if constraints[b] is not None)
    bits = torch.full((len(rows) * n, (vocab + 31) // 32), -1,
                      dtype=torch.int32)  # host: xgrammar fills its bitmask on the CPU
    for i, b in enumerate(rows):
        c = constraints[b]
        if c is not None and not c.finished:
            c.path_masks(paths[i], bits, [i * n + j for j in range(n)])
    ids = vocab_ids.cpu()
    allowed = ((bits[:, ids // 32] >> (ids % 32).to(torch.int32)) & 1).bool()      # (R*n, K)
    allowed[~allowed.any(-1)] = True
    return allowed.view(len(rows), n, -1).to(vocab_ids.device)


def apply_masks(logits: torch.Tensor, bits: torch.Tensor, index: list[int]) -> None:
    """Set to -inf, in place, the logits the bitmasks forbid: logits (B, N, V), bits (B*N, W) int32
    (one row per slot, -1 where a slot is not masked), index the masked slots b*N + n."""
    import xgrammar as xgr
    vocab = logits.shape[-1]
    bits = bits.to(logits.device)
    if logits.is_contiguous():
        xgr.apply_token_bitmask_inplace(logits.view(-1, vocab), bits, indices=index)
        return
    flat = logits.reshape(-1, vocab)      # a copy: masked there, then written back
    xgr.apply_token_bitmask_inplace(flat, bits, indices=index)
    logits.copy_(flat.view(logits.shape))
