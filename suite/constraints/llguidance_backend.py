"""The llguidance backend (1.9.1): a lazy lexer + Earley parser over the vocabulary. It refuses the
keywords it does not implement (naming them) instead of dropping them, searches `pattern` as the
specification says, enforces `allOf` and length bounds beside a pattern, and finds empty regexes
("Unsatisfiable schema") when compiling. Its matcher is wrapped in xgrammar's method names, so
RowConstraint reads either backend the same way."""
from __future__ import annotations

import re

NAME = "llguidance"

# JSON as the loop's grammars write it: no free whitespace, separators ", " and ": ".
OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def schema_grammar(schema: dict, approximate: bool = False) -> str:
    """llguidance's grammar of a JSON schema (approximate: unimplemented keywords ignored and oneOf read
    as anyOf, each listed in the compile warnings)."""
    import llguidance as llg
    options = dict(OPTIONS, lenient=True, coerce_one_of=True) if approximate else OPTIONS
    return llg.LLMatcher.grammar_from_json_schema(schema, defaults=options)


def regex_grammar(regex: str) -> str:
    import llguidance as llg
    return llg.LLMatcher.grammar_from_regex(regex)


def limits(budget):
    import llguidance as llg
    return llg.LLParserLimits(max_grammar_size=budget.max_grammar_size, initial_lexer_fuel=budget.lexer_fuel,
                              verbose_errors=False)


def check(grammar: str, budget, tokenizer=None) -> list[str]:
    """The grammar's warnings (what an approximation ignored); ValueError with llguidance's reason if it
    cannot be compiled (an unimplemented keyword, an empty regex, over the budget's limits)."""
    import llguidance as llg
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer, limits=limits(budget))
    if is_error:
        raise ValueError(reason(messages[0] if messages else "unknown error"))
    return list(messages)


def reason(message: str) -> str:
    return re.sub(r"\s+", " ", message).strip()


def unimplemented(message: str) -> list[str]:
    """The keywords an llguidance error names as not implemented."""
    found = re.findall(r'"([^"]+)"', message.split("Unimplemented keys:", 1)[1]) if "Unimplemented keys" in message else []
    if "oneOf constraints are not supported" in message:
        found.append("oneOf")
    found += [f"format:{f}" for f in re.findall(r"Unknown format: ([\w-]+)", message)]
    if "min/maxProperties only supported" in message:
        found.append("minProperties/maxProperties beside additional properties")
    return found


class Backend:
    """Compiles llguidance grammars against one tokenizer; makes matchers."""
    name = NAME

    def __init__(self, tokenizer, vocab_size: int, stop: list[int]):
        import llguidance.hf
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=stop)
        self.stop = list(stop)

    def compile(self, grammar: str, budget):
        check(grammar, budget, self.tokenizer)
        return grammar, limits(budget)

    def matcher(self, compiled) -> "Matcher":
        return Matcher(self.tokenizer, *compiled, stop=self.stop)


class Matcher:
    """An llguidance LLMatcher under xgrammar's GrammarMatcher method names. llguidance stops by itself
    where nothing can follow; here, as in xgrammar, the row ends only once it takes a stop token (the
    only token allowed there)."""

    def __init__(self, tokenizer, grammar: str, parser_limits, stop=()):
        import llguidance as llg
        self.m = llg.LLMatcher(tokenizer, grammar, log_level=0, limits=parser_limits)
        if self.m.is_error():
            raise ValueError(reason(self.m.get_error()))
        self.stop, self.ended, self.eos_in_m = tuple(stop), False, False

    def accept_token(self, token: int) -> bool:
        """Advance by one token; False (and no change) where the grammar rejects it."""
        token = int(token)
        if self.ended or self.m.is_error():
            return False
        if self.m.is_stopped():                  # llguidance already stopped: the stop token ends the row
            self.ended, self.eos_in_m = token in self.stop, False
            return self.ended
        if token in self.stop:
            if not self.m.is_accepting():
                return False
            self.ended = self.eos_in_m = self.m.consume_token(token)
            return self.ended
        return self.m.try_consume_tokens([token]) == 1

    def rollback(self, n: int) -> None:
        if n and self.ended:
            self.ended = False
            n -= 0 if self.eos_in_m else 1
        if n > 0 and not self.m.rollback(n):
            raise RuntimeError(f"llguidance could not roll back {n} tokens: {self.m.get_error()}")

    def is_terminated(self) -> bool:
        return self.ended

    def fill_next_token_bitmask(self, out, index: int = 0) -> None:
        if self.ended or self.m.is_stopped() or self.m.is_error():
            out[index].zero_()          # an error (a grammar that admits nothing): no token at all
            if not self.ended and not self.m.is_error():
                for t in self.stop:
                    out[index, t // 32] |= (1 << (t % 32)) if t % 32 < 31 else -(1 << 31)
            return
        import llguidance.torch
        llguidance.torch.fill_next_token_bitmask(self.m, out, index)
        if self.m.is_error():           # found while computing the mask: nothing can follow
            out[index].zero_()

    def find_jump_forward_string(self) -> str:
        return self.m.compute_ff_bytes().decode("utf-8", errors="ignore")

    def find_jump_forward_tokens(self) -> list[int]:
        return list(self.m.compute_ff_tokens())
