"""The preallocated static cache (rollback = pointer move) and the compiled fixed-shape step:
every decoder over them equals `ar` over the dynamic cache, token for token (fp32)."""
import pytest
import torch
from tinymodels import tiny_model

import suite
from suite.guidance import ClassifierFreeGuidance
from suite.models.static_cache import StaticHFCausalLM, StaticKVCache

DECODERS = [("ar", {}), ("jacobi", {}), ("sjd", {}), ("mc_sjd", {}), ("lookahead", {}), ("ngram", {}),
            ("speculative", {"draft": "self:1"})]


def ragged_prompts():
    ids = torch.randint(1, 99, (3, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[2, :1] = 0
    return ids, mask


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_every_decoder_over_the_static_cache_equals_ar(arch):
    model = tiny_model(arch)
    ids, mask = ragged_prompts()
    ref = suite.generate(model, ids, mask, decoder="ar", max_new_tokens=20)
    static = StaticHFCausalLM(model, max_cache_len=64, compiled_widths=())
    for name, opts in DECODERS:
        if arch == "gpt2" and name == "speculative":
            opts = {"draft_model": tiny_model("gpt2", seed=1)}
        out = suite.generate(static, ids, mask, decoder=name, max_new_tokens=20, **opts)
        assert torch.equal(out.sequences, ref.sequences), name


def test_rollback_moves_the_pointer_and_keeps_the_buffers():
    model = tiny_model("llama")
    ids, mask = ragged_prompts()
    static = StaticHFCausalLM(model, max_cache_len=64, compiled_widths=())
    adapter, decoder, state = suite.prepare(static, ids, mask, decoder="lookahead", max_new_tokens=20)
    assert isinstance(state.cache, StaticKVCache)
    addresses = None
    for _ in suite.decode_steps(adapter, decoder, state):
        layers = state.cache.backend.layers
        addresses = addresses or [layer.keys.data_ptr() for layer in layers]
        assert [layer.keys.data_ptr() for layer in layers] == addresses     # never reallocated
        assert all(int(layer.cumulative_length) == state.cache.num_slots for layer in layers)
    assert state.cache.num_slots < 64


def test_cfg_over_the_static_cache_equals_cfg_over_the_dynamic_cache():
    model = tiny_model("llama")
    ids = torch.randint(1, 99, (2, 5), generator=torch.Generator().manual_seed(0))
    uncond = torch.zeros_like(ids)
    ref = suite.generate(ClassifierFreeGuidance(suite.as_adapter(model), 2.0, uncond), ids, max_new_tokens=12)
    static = ClassifierFreeGuidance(StaticHFCausalLM(model, 48, compiled_widths=()), 2.0, uncond)
    for name in ("ar", "jacobi"):
        out = suite.generate(static, ids, decoder=name, max_new_tokens=12)
        assert torch.equal(out.sequences, ref.sequences), name


def test_a_request_longer_than_the_cache_says_how_to_fix_it():
    static = StaticHFCausalLM(tiny_model("llama"), max_cache_len=16, compiled_widths=())
    with pytest.raises(ValueError, match=r"holds 16 slots and this request needs 28 \(its longest prompt \+ "
                                         r"max_new_tokens\): build StaticHFCausalLM with a larger max_cache_len"):
        suite.generate(static, torch.ones(1, 8, dtype=torch.long), max_new_tokens=20)


def test_compiled_steps_equal_eager_token_for_token():
    """torch.compile'd width-1 (ar) and width-5 (jacobi window) steps, compiled ahead in a background
    thread (`warm`: the requests then compile nothing more); the prefill runs eagerly."""
    from torch._dynamo.utils import counters
    model = tiny_model("llama")
    ids, mask = ragged_prompts()
    compiled = StaticHFCausalLM(model, max_cache_len=64, compiled_widths=(1, 5))
    compiled.warm(background=True, batch=ids.shape[0]).join()
    graphs = counters["stats"]["unique_graphs"]
    for name in ("ar", "jacobi"):
        ref = suite.generate(model, ids, mask, decoder=name, max_new_tokens=20)
        out = suite.generate(compiled, ids, mask, decoder=name, max_new_tokens=20)
        assert torch.equal(out.sequences, ref.sequences), name
    assert counters["stats"]["unique_graphs"] == graphs


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's choice")
@pytest.mark.parametrize("mode, compiled_as", [("reduce-overhead", None), ("max-autotune", "max-autotune-no-cudagraphs"),
                                               ("default", "default"), (None, None)])
def test_cuda_graph_modes_compile_without_graphs_on_a_cpu(monkeypatch, mode, compiled_as):
    """On a CPU inductor skips CUDA graphs and warns once per compiled step (thousands of lines): a
    CUDA-graph mode compiles as its graph-less form there."""
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw["mode"]) or fn)
    StaticHFCausalLM(tiny_model("llama"), max_cache_len=16, compiled_widths=(1,), mode=mode)
    assert seen == [compiled_as]


def test_the_static_cache_is_the_adapters_context_and_every_request_within_it_decodes(tmp_path, monkeypatch):
    """Issue 40, finding 6: a 30-token jacobi request over StaticHFCausalLM(max_cache_len=128), its
    cost curve measured afresh on that adapter (which once asked for 256 slots), equals ar; and at the
    edge, a ragged batch whose longest row fills the cache to its last slot (the rule: longest prompt
    + max_new_tokens), with wide fixed drafts (cut to each row's room; a short row's draft past the
    longest row's grows the cache), equals ar."""
    import suite.cost
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))       # nothing measured before: measure on this adapter
    monkeypatch.setattr(suite.cost, "_MEMORY", {})
    model = tiny_model("llama")
    ids = torch.randint(3, 90, (1, 10), generator=torch.Generator().manual_seed(0))
    static = StaticHFCausalLM(model, max_cache_len=128, compiled_widths=())
    assert static.config.max_length == 128
    out = suite.generate(static, ids, decoder="jacobi", max_new_tokens=30)
    assert torch.equal(out.sequences, suite.generate(model, ids, decoder="ar", max_new_tokens=30).sequences)
    assert suite.cost.forward_cost(static).widths[-1] < 128              # measured within the cache

    ids, mask = ragged_prompts()
    ref = suite.generate(model, ids, mask, decoder="ar", max_new_tokens=20)
    tight = StaticHFCausalLM(model, max_cache_len=ids.shape[1] + 20, compiled_widths=())
    for name, opts in [("jacobi", {"window": 12}), ("lookahead", {}), ("ngram", {}), ("sjd", {})]:
        out = suite.generate(tight, ids, mask, decoder=name, max_new_tokens=20, cost=None, **opts)
        assert torch.equal(out.sequences, ref.sequences), name
    with pytest.raises(ValueError, match="this request needs 28"):
        suite.generate(tight, torch.ones(1, 8, dtype=torch.long), decoder="ar", max_new_tokens=20)
