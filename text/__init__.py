"""LLM text generation with parasuite's parallel decoders over any transformers causal LM.

    import text
    gen = text.load()        # embedded SmolLM2-135M-Instruct, offline (converted once into a cache)
    res = gen.generate("def fib(n):", decoder="ngram", max_new_tokens=128)
    res.text, res.token_ids, res.stats
    for chunk in gen.stream("Tell me a story.", chat=True, decoder="lookahead"):
        print(chunk, end="")

`import text` stays light: torch and transformers are imported on first use of `load`.
"""
from __future__ import annotations

__all__ = ["TextGenerator", "TextResult", "TextStream", "load"]


def __getattr__(name: str):
    if name in __all__:
        from . import generator
        return getattr(generator, name)
    raise AttributeError(f"module 'text' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
