"""Structured output: a request's rows constrained by a JSON schema or a regex (issues 37, 50).

`check(json_schema | regex, backend=, strict=, approximate=)` reads a constraint without a tokenizer and
plans it: the schema's draft (draft-04 to 2020-12), its size against the compile `Budget`, and the
backend, chosen per schema by its keywords (suite/constraints/keywords.py): xgrammar 0.2.9 (the fastest
masks here) when it enforces every keyword the schema uses, else llguidance 1.9.1, which refuses what it
does not implement. A keyword neither enforces (uniqueItems, not, dependencies, ...) is left out and the rest
enforced (approximate=True, the default): the grammar lists it (`Grammar.relaxed`, `TextResult.relaxed`), and
every output is validated against the whole schema, its errors naming what was not enforced. A schema is
refused where nothing of its top level would be enforced, or with approximate=False (every keyword
enforced or none: the keywords named). JSON Schema as written: undeclared
properties allowed unless `additionalProperties` (or strict=True, the closed form) says otherwise,
`pattern` searched, `required` enforced; properties are written in the schema's order (a narrowing:
never an invalid document). `Compiler(tokenizer, vocab_size, eos_token_ids)` compiles a plan into a
`Grammar` (kept in an LRU cache; one admitting no text is refused), which checks every output
(`Grammar.validate`: jsonschema, formats asserted) and makes one `RowConstraint` per row: the row's
matcher, advanced by every committed token. Requests carry them in `RequestInputs.constraints` (one
per row, None for a free row), so they move with their rows (`DecodeState.select` / `extend`, the
scheduler).

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
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

class ConstraintError(ValueError):
    """A schema or regex that cannot constrain generation (what is wrong and how to fix it)."""


BACKENDS = ("auto", "xgrammar", "llguidance")


@dataclass(frozen=True)
class Budget:
    """What one compile may cost; a schema over it is refused before compiling."""
    max_schema_nodes: int = 20_000       # subschemas in the schema (its size as written)
    max_grammar_size: int = 500_000      # llguidance: symbols in the grammar it builds
    lexer_fuel: int = 1_000_000          # llguidance: work building the lexer (~50k a ms)


@dataclass(frozen=True)
class Plan:
    """What a request's constraint compiles to, decided without a tokenizer (suite.constraint.check)."""
    kind: str                    # "json_schema" or "regex"
    source: str                  # the schema as JSON text (its closed form in strict mode), or the regex
    backend: str                 # "xgrammar" or "llguidance"
    grammar: str                 # the backend's grammar text
    relaxed: tuple = ()          # keywords not enforced (approximate=True, the default), e.g. "uniqueItems"


@dataclass(frozen=True)
class Grammar:
    """A compiled JSON schema or regex over one tokenizer's vocabulary, shared by the rows of
    every request that uses it (immutable)."""
    kind: str                   # "json_schema" or "regex"
    source: str                 # the schema as JSON text, or the regex
    compiled: Any               # the backend's compiled grammar
    vocab_size: int             # the model's logits width
    encode: Any = None          # text -> token ids (the tokenizer's own encoding), for forced spans
    backend: str = "xgrammar"   # which backend compiled it (suite/constraints/)
    relaxed: tuple = ()         # keywords it does not enforce (outputs are validated against them)
    new_matcher: Any = None     # compiled -> a matcher (xgrammar's GrammarMatcher by default)

    @property
    def schema(self) -> dict | None:
        return json.loads(self.source) if self.kind == "json_schema" else None

    def matcher(self):
        if self.new_matcher is not None:
            return self.new_matcher(self.compiled)
        from .constraints.xgrammar_backend import Backend
        return Backend.matcher(self.compiled)

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
            return None, f"not complete JSON ({e.msg}: char {e.pos}): raise max_new_tokens"

    def validate(self, text: str) -> tuple[Any, str | None, bool, list[str]]:
        """(parsed, parse_error, valid, validation_errors) of an output: for a schema, the parsed object
        checked against the schema (suite.constraints.validate: its draft, formats asserted); for a regex,
        valid when the whole text matches."""
        parsed, error = self.parse(text)
        if error is not None:
            return parsed, error, False, [error]
        if self.kind == "regex":
            return parsed, None, True, []
        from .constraints.validate import errors
        found = errors(self.schema, parsed, relaxed=self.relaxed)
        return parsed, None, not found, found


class Compiler:
    """Compiles schemas and regexes against one tokenizer (its vocabulary read once), keeping the last
    `cache_size` grammars (LRU): a repeated schema costs nothing. A tokenizer with `for_grammar()` (the llama.cpp
    engine's, text.llama_cpp_tokenizer) hands over the transformers tokenizer the backends read."""

    def __init__(self, tokenizer, vocab_size: int | None = None, eos_token_ids=(), budget: Budget = Budget(),
                 cache_size: int = 64):
        if hasattr(tokenizer, "for_grammar"):
            tokenizer = tokenizer.for_grammar()
        self.vocab_size = int(vocab_size or len(tokenizer))
        self.stop = sorted(set(eos_token_ids) or {tokenizer.eos_token_id})
        self.tokenizer, self.budget, self.cache_size = tokenizer, budget, cache_size
        self._encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
        self._backends: dict = {}
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def backend(self, name: str):
        if name not in self._backends:
            from .constraints import llguidance_backend, xgrammar_backend
            module = xgrammar_backend if name == "xgrammar" else llguidance_backend
            self._backends[name] = module.Backend(self.tokenizer, self.vocab_size, self.stop)
        return self._backends[name]

    def compile(self, json_schema: dict | str | None = None, regex: str | None = None, *, backend: str = "auto",
                strict: bool = False, approximate: bool = True) -> Grammar:
        """A Grammar from exactly one of a JSON schema (a dict, or its JSON text) or a regex;
        ConstraintError naming the fix otherwise (see `check`: the backend choice, strict, approximate)."""
        with self._lock:
            key = (json.dumps(json_schema) if json_schema is not None else None, regex, backend, strict, approximate)
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            plan = check(json_schema, regex, backend=backend, strict=strict, approximate=approximate, budget=self.budget)
            grammar = self._build(plan)
            self._cache[key] = grammar
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return grammar

    def _build(self, plan: Plan) -> Grammar:
        what = plan.kind.replace("_", " ")
        engine = self.backend(plan.backend)
        try:
            compiled = engine.compile(plan.grammar, self.budget) if plan.backend == "llguidance" else \
                engine.compile(plan.grammar)
        except (RuntimeError, ValueError) as e:
            raise ConstraintError(_refusal(what, _reason(e))) from e
        grammar = Grammar(plan.kind, plan.source, compiled, self.vocab_size, self._encode, plan.backend,
                          plan.relaxed, engine.matcher)
        row = grammar.row()
        if not row.finished and not bool(row.allowed_bits().any()):
            raise ConstraintError(f"this {what} admits no text (e.g. a pattern that matches nothing, such as "
                                  "[^\\s\\S]): fix it so that some output can satisfy it")
        return grammar


def check(json_schema: dict | str | None = None, regex: str | None = None, *, backend: str = "auto",
          strict: bool = False, approximate: bool = True, budget: Budget = Budget()) -> Plan:
    """Check a request's constraint without a tokenizer (a CLI does it before loading the model) and
    choose its backend: ConstraintError naming the fix for a bad schema or regex, neither or both, an
    unsupported draft, a schema over the budget, or keywords no backend enforces (approximate=False, or
    where nothing of the schema's top level is left).

    backend "auto" takes xgrammar (the fastest masks) when it enforces every keyword the schema uses,
    else llguidance (which refuses what it does not implement). strict: objects that list properties
    take no others (the closed form, as OpenAI's strict: true). approximate (default True): a schema using a
    keyword no backend enforces is compiled without it, and the Plan (then the Grammar, the result) lists it;
    False: such a schema is refused, naming the keywords."""
    if backend not in BACKENDS:
        raise ConstraintError(f"unknown constraint backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if (json_schema is None) == (regex is None):
        raise ConstraintError("give exactly one of json_schema= (a JSON schema: dict or JSON text) and "
                              "regex= (a pattern)" + ("; drop one of them" if json_schema is not None else ""))
    if regex is not None:
        return _regex_plan(regex, backend)
    from .constraints import keywords
    schema = _schema_dict(json_schema)
    if strict:
        schema = keywords.closed(schema)
    nodes = keywords.size(schema)
    if nodes > budget.max_schema_nodes:
        raise ConstraintError(f"the schema has {nodes} subschemas, over the compile budget of "
                              f"{budget.max_schema_nodes}: split it, or raise Budget(max_schema_nodes=...)")
    enforced = keywords.without_annotations(schema)
    return _schema_plan(json.dumps(schema), enforced, keywords.keywords(enforced), backend, approximate, budget)


def _schema_plan(source: str, schema: dict, used: set, backend: str, approximate: bool, budget: Budget) -> Plan:
    """The plan of `schema` (the one to enforce: `source` less its annotation formats): a backend that
    enforces all of it, else (approximate) one that enforces the rest, else ConstraintError."""
    from .constraints import llguidance_backend as llg, xgrammar_backend as xgr
    refused = {}
    missing = xgr.unenforced(used)
    if backend in ("auto", "xgrammar"):
        try:
            if not missing:
                return Plan("json_schema", source, "xgrammar", xgr.schema_ebnf(schema))
            refused["xgrammar"] = "it does not enforce " + ", ".join(sorted(missing))
        except RuntimeError as e:
            refused["xgrammar"] = _reason(e)
    if backend in ("auto", "llguidance"):
        try:
            grammar = llg.schema_grammar(schema)
            llg.check(grammar, budget)
            return Plan("json_schema", source, "llguidance", grammar)
        except ValueError as e:
            _raise_if_hopeless(e)
            refused["llguidance"] = _reason(e)
    if approximate:
        for plan in _relaxed_plans(source, schema, missing, backend, refused, budget):
            if _enforces_something(schema, plan.relaxed):
                return plan
            refused[plan.backend] = "it would enforce nothing of the schema's top level"
    named = sorted({k for why in refused.values() for k in llg.unimplemented(why)} | set(missing))
    raise ConstraintError(
        "no constraint backend enforces this JSON schema as written"
        + (f" (it uses {', '.join(named)})" if named else "") + ": "
        + "; ".join(f"{name}: {why}" for name, why in refused.items())
        + (". Nothing sensible is left to enforce without them: drop or rewrite those keywords" if approximate else
           ". You asked for every keyword enforced (approximate=False, --enforce-all): drop those keywords, or "
           "leave approximate on (the default) to enforce the rest and have the result validated against all"))


def _raise_if_hopeless(e: ValueError) -> None:
    """An unsatisfiable schema, or one over the budget, is refused whatever else could be tried."""
    if "Unsatisfiable" in str(e) or "too big" in str(e) or "limit" in str(e):
        raise ConstraintError(_refusal("JSON schema", _reason(e))) from e


def _relaxed_plans(source: str, schema: dict, missing: set, backend: str, refused: dict, budget: Budget):
    """Plans that enforce what a backend can of the schema, each naming what it leaves out (`relaxed`):
    llguidance leniently (it enforces the most), then xgrammar without the keywords it lacks."""
    from .constraints import llguidance_backend as llg, xgrammar_backend as xgr
    if backend in ("auto", "llguidance"):
        grammar = llg.schema_grammar(schema, approximate=True)
        try:
            warnings = llg.check(grammar, budget)
        except ValueError as e:
            _raise_if_hopeless(e)
            refused["llguidance"] = _reason(e)
        else:
            relaxed = {k for w in warnings for k in llg.unimplemented(w)} | set(
                llg.unimplemented(refused.get("llguidance", "")))
            if not relaxed and "llguidance" in refused:    # never weakened unsaid: what it refused, in its words
                relaxed = {refused["llguidance"]}
            yield Plan("json_schema", source, "llguidance", grammar, tuple(sorted(relaxed)))
    if backend in ("auto", "xgrammar") and missing:
        try:
            yield Plan("json_schema", source, "xgrammar", xgr.schema_ebnf(schema), tuple(sorted(missing)))
        except RuntimeError as e:
            refused["xgrammar"] = _reason(e)


def _enforces_something(schema: dict, relaxed: tuple) -> bool:
    """Whether a grammar that leaves out `relaxed` still constrains the schema's top level: not when every
    constraining keyword there is one it leaves out ({"not": {...}} alone would be any JSON at all)."""
    from .constraints.keywords import CONSTRAINING, relaxed_keyword
    top = {k for k in schema if k in CONSTRAINING}
    left_out = {relaxed_keyword(r) for r in relaxed}
    return not relaxed or not top or bool(top - left_out)


def _regex_plan(regex, backend: str) -> Plan:
    from .constraints import llguidance_backend as llg, xgrammar_backend as xgr
    if not isinstance(regex, str) or not regex:
        raise ConstraintError(f"regex must be a non-empty str, got {regex!r}")
    errors = {}
    for name in (("xgrammar", "llguidance") if backend == "auto" else (backend,)):
        try:
            if name == "xgrammar":
                return Plan("regex", regex, name, xgr.regex_ebnf(regex))
            grammar = llg.regex_grammar(regex)
            llg.check(grammar, Budget())
            return Plan("regex", regex, name, grammar)
        except (RuntimeError, ValueError) as e:
            errors[name] = _reason(e)
    raise ConstraintError(f"invalid regex {regex!r}: " + "; ".join(errors.values()) + "; fix the pattern")


def _refusal(what: str, why: str) -> str:
    if "Unsatisfiable" in why:
        return f"this {what} admits no document ({why}): fix it so that some output can satisfy it"
    if "too big" in why or "limit" in why:
        return f"this {what} is over the compile budget ({why}): simplify it, or raise suite.constraint.Budget"
    return f"cannot compile this {what}: {why}; fix it"


def _schema_dict(schema) -> dict:
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
    from .constraints.keywords import draft
    try:
        draft(schema)
    except ValueError as e:
        raise ConstraintError(str(e)) from None
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the top level"
        raise ConstraintError(f"invalid JSON schema at {where}: {e.message}; fix the schema") from e
    return schema


def _reason(e: BaseException) -> str:
    """A backend's message on one line, without xgrammar's source location prefix."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", text)


class RowConstraint:
    """One row's matcher: advanced by the row's committed tokens; draft paths are walked
    tentatively and rolled back."""

    def __init__(self, grammar: Grammar, forced: bool = True):
        self.grammar, self.forced = grammar, forced
        self.matcher = grammar.matcher()
        self._bitmask = torch.full((1, (grammar.vocab_size + 31) // 32), -1, dtype=torch.int32)  # host: the grammar backends fill bitmasks on the CPU
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
