"""text.load(compile=...): requests run on the static-cache adapter with compiled one-token steps, and give the
eager tokens. torch.compile is replaced by the identity here (compiling takes minutes on a CPU; the compiled
step's own exactness is tests/core/test_static_cache.py's)."""
import pytest
import torch

import text
from suite.models.static_cache import StaticHFCausalLM


def test_compiled_generator_gives_the_eager_tokens(tiny_dir, monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    eager = text.load(tiny_dir)
    compiled = text.load(tiny_dir, compile="freezing")
    assert isinstance(compiled.adapter, StaticHFCausalLM) and compiled.adapter.compiled_widths == {1}
    for decoder in ("ar", "ngram"):
        want = eager.generate(["def fib(n):", "Hello"], decoder=decoder, max_new_tokens=12)
        got = compiled.generate(["def fib(n):", "Hello"], decoder=decoder, max_new_tokens=12)
        assert got.token_ids == want.token_ids, decoder
    with pytest.raises(ValueError, match="before the first request"):
        compiled.compile("default")
    with pytest.raises(ValueError, match="unknown compile setting 'fast'"):
        text.load(tiny_dir, compile="fast")
