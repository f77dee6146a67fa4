"""The xgrammar backend (0.2.9): a token-level automaton over the vocabulary; the fastest masks here
(issue 37), but it enforces only part of JSON Schema (it drops `uniqueItems`, `allOf`, `pattern` beside
length bounds and an `anyOf`'s siblings, reads `oneOf` as `anyOf`, anchors `pattern`), so it is given only schemas whose every
keyword is in ENFORCED (checked on the JSONSchemaBench sample, scripts/schema_compliance.py)."""
from __future__ import annotations

import json

NAME = "xgrammar"

# What it enforces as the specification says (and what the compliance sample confirmed). Not minLength /
# maxLength: its length-bounded strings take no escapes (a valid "say \"hi\"" is refused); not anyOf or
# $ref beside other keywords (it reads the union alone).
ENFORCED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "$ref",
    "minProperties", "maxProperties"})

# xgrammar writes the characters of a length-bounded string as [^"\\\r\n]: raw control characters (a tab)
# pass, which JSON forbids (json.loads rejects them). Its unbounded strings exclude them already.
_LOOSE_CHARS = '[^\\"\\\\\\r\\n]'
_JSON_CHARS = '[^\\0-\\x1f\\"\\\\]'


def unenforced(used: set[str]) -> set[str]:
    return {k for k in used if k not in ENFORCED}


def schema_ebnf(schema: dict) -> str:
    """The EBNF of a JSON schema (compact separators ", " and ": ", no free whitespace, undeclared
    properties as the schema says: the closed form is keywords.closed's); RuntimeError if xgrammar
    cannot read it."""
    import xgrammar as xgr
    text = json.dumps(schema)
    return str(xgr.Grammar.from_json_schema(text, any_whitespace=False, strict_mode=False)).replace(
        _LOOSE_CHARS, _JSON_CHARS)


def regex_ebnf(regex: str) -> str:
    import xgrammar as xgr
    return str(xgr.Grammar.from_regex(regex))


class Backend:
    """Compiles EBNF grammars over one tokenizer's vocabulary; makes matchers."""
    name = NAME

    def __init__(self, tokenizer, vocab_size: int, stop: list[int]):
        import xgrammar as xgr
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop)
        self._compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)

    def compile(self, ebnf: str):
        return self._compiler.compile_grammar(ebnf)

    @staticmethod
    def matcher(compiled):
        """xgrammar's own matcher: the interface RowConstraint reads (accept_token, rollback,
        fill_next_token_bitmask, is_terminated, find_jump_forward_string)."""
        import xgrammar as xgr
        return xgr.GrammarMatcher(compiled)
