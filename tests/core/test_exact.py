"""Every greedy decoder equals `ar` token for token, and `ar` equals transformers' generate (fp32),
on tiny random models of four architectures (also with suite.models.linear_forms swapped in), for batch 1
and a ragged (left-padded) batch of 3."""
import pytest
import torch
from tinymodels import ARCHS, tiny_model

import suite
from suite.models.linear_forms import swap_linears

NEW = 24
PROMPTS = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11],
                        [0, 0, 0, 20, 21, 22, 20, 21, 23, 24],
                        [0, 30, 31, 32, 33, 34, 35, 30, 31, 36]])
# every matmul form of suite.models.linear_forms at some width (one extra weight layout per mix)
MIXES = {"transposed": {1: "linear", 2: "wxt", 4: "xwt", 8: "wxt", 16: "xwt", 32: "wxt"},
         "packed": {1: "wxt", 2: "onednn", 4: "linear", 8: "onednn", 16: "wxt", 32: "onednn"}}
MASK = (torch.arange(10)[None] >= torch.tensor([[0], [3], [1]])).long()


@pytest.fixture(scope="module", params=[(a, forms) for a in ARCHS for forms in (None, "transposed", "packed")],
                ids=lambda p: p[0] + ("" if p[1] is None else f"-{p[1]}-forms"))
def arch_model(request):
    """Each architecture as built, and with its linear layers swapped to per-width matmul forms
    (suite.models.linear_forms, a fixed mix of every form so each one is exercised)."""
    arch, forms = request.param
    model = tiny_model(arch)
    if forms is not None:
        swap_linears(model, forms=MIXES[forms])
    return arch, model


def decoder_options(name, arch):
    if name == "speculative":
        return {"draft_model": tiny_model(arch, seed=1)} if arch == "gpt2" else {"draft": "self:1"}
    return {}


@pytest.mark.parametrize("rows", [slice(0, 1), slice(0, 3)], ids=["batch1", "ragged3"])
def test_greedy_decoders_equal_ar_and_transformers(arch_model, rows):
    arch, model = arch_model
    ids, mask = PROMPTS[rows], MASK[rows]
    reference = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    ar = suite.generate(model, ids, attention_mask=mask, decoder="ar", max_new_tokens=NEW)
    assert torch.equal(ar.sequences, reference)
    assert ar.stats.num_forwards == NEW
    for name in suite.TEXT_DECODERS:
        out = suite.generate(model, ids, attention_mask=mask, decoder=name, max_new_tokens=NEW,
                             **decoder_options(name, arch))
        assert torch.equal(out.sequences, reference), name
        assert out.stats.num_new_tokens == NEW * ids.shape[0]
        assert out.stats.num_forwards <= NEW


def test_eos_mid_block_stops_where_ar_stops():
    model = tiny_model("llama")
    ar = suite.generate(model, PROMPTS[:1], max_new_tokens=NEW)
    eos = ar.new_tokens[0][7]   # make the 8th generated token the end of sequence
    first = ar.new_tokens[0].index(eos)
    for name in suite.TEXT_DECODERS:
        out = suite.generate(model, PROMPTS[:1], decoder=name, max_new_tokens=NEW, eos_token_id=eos,
                             **decoder_options(name, "llama"))
        assert out.new_tokens[0] == ar.new_tokens[0][:first + 1], name
