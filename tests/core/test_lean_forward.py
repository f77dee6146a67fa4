"""suite.models.lean_forward: a Llama-family model's eager steps over a static cache run the same ops as
transformers' forward, so their logits are transformers' bit for bit, in float32 and in bfloat16, for a
prompt's chunk and for decode steps of every width, with the projections fused and pinned as the embedded
model's are (unsharpened random models: only bitwise-equal logits pass)."""
import pytest
import torch
from tinymodels import VOCAB, tiny_model

import suite.models.static_cache as static_cache
from suite.models.lean_forward import LeanForward
from suite.models.linear_forms import swap_linears
from suite.models.step import fixed_step

ROWS = [[5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 12, 5, 6, 7], [20, 21, 22, 20, 21, 23, 24, 20, 21, 22, 20, 25, 26, 27]]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_lean_forward_gives_transformers_logits_bitwise(arch, dtype, monkeypatch):
    model = tiny_model(arch, sharpen=1.0).to(getattr(torch, dtype))
    swap_linears(model, forms={1: "wxt", 2: "onednn", 4: "linear", 8: "onednn", 16: "wxt", 32: "onednn"},
                 pinned="onednn")
    lean = fixed_step(model, 8, 16, max_cache_len=96)
    with monkeypatch.context() as m:
        m.setattr(static_cache, "lean_forward", lambda model: None)
        plain = fixed_step(model, 8, 16, max_cache_len=96)
    calls = []
    real = LeanForward.__call__
    monkeypatch.setattr(LeanForward, "__call__", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    adapters = (lean, plain)
    caches = [a.new_cache(len(ROWS)) for a in adapters]
    gen, start = torch.Generator().manual_seed(0), 0
    steps = [torch.tensor(ROWS)] + [torch.randint(VOCAB, (len(ROWS), w), generator=gen) for w in (8, 1, 4, 8, 1)]
    for tokens in steps:
        width = tokens.shape[1]
        positions = torch.arange(start, start + width).expand(len(ROWS), width)
        first = width - 1 if start == 0 else 0                  # a prompt's chunk: its last slot's logits
        with torch.no_grad():                                   # as the decode loop runs every forward
            logits = [a(tokens, positions, c, None, logits_from=first) for a, c in zip(adapters, caches)]
        assert torch.equal(logits[0], logits[1]), width
        for c in caches:
            c.append(positions, torch.ones(len(ROWS), width, dtype=torch.bool), dense=True)
        start += width
    assert len(calls) == 6                                      # every forward of `lean` ran the lean path
