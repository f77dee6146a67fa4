"""block_diffusion and s2d2 on tiny random transformers models and a scripted model: exactness
where documented (block size 1, threshold above 1, s2d2 always), progress and masks."""
import pytest
import torch
from scripted import ScriptedModel
from tinymodels import tiny_model

import suite
from suite.decoders.blocks.block_diffusion import BlockDiffusion, block_mask
from suite.decoders.blocks.s2d2 import S2D2

PROMPTS = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11],
                        [0, 0, 0, 20, 21, 22, 20, 21, 23, 24],
                        [0, 30, 31, 32, 33, 34, 35, 30, 31, 36]])
MASK = (torch.arange(10)[None] >= torch.tensor([[0], [3], [1]])).long()
NEW, MASK_ID = 16, 3


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request):
    return tiny_model(request.param)


def run(model, decoder, rows=slice(0, 3), **kw):
    return suite.generate(model, PROMPTS[rows], attention_mask=MASK[rows], decoder=decoder, max_new_tokens=NEW, **kw)


def test_block_size_one_is_ar(model):
    ar = run(model, "ar")
    out = run(model, BlockDiffusion(block_size=1, mask_token_id=MASK_ID))
    assert torch.equal(out.sequences, ar.sequences)
    assert out.stats.num_forwards == ar.stats.num_forwards


def test_block_size_one_is_ar_when_sampling(model):
    ar = run(model, "ar", temperature=1.0, seed=3)
    out = run(model, BlockDiffusion(block_size=1, mask_token_id=MASK_ID), temperature=1.0, seed=3)
    assert torch.equal(out.sequences, ar.sequences)


def test_threshold_above_one_is_ar_and_threshold_one_fills_only_certain_slots(model):
    ar = run(model, "ar")
    never = run(model, BlockDiffusion(block_size=4, threshold=1.01, mask_token_id=MASK_ID))
    assert torch.equal(never.sequences, ar.sequences)
    assert never.stats.num_forwards == ar.stats.num_forwards
    # a random model is never certain (softmax < 1.0 in fp32): threshold 1.0 is then AR too
    certain = run(model, BlockDiffusion(block_size=4, threshold=1.0, mask_token_id=MASK_ID))
    assert torch.equal(certain.sequences, ar.sequences)


class CertainModel(ScriptedModel):
    """Logits depend on the query's position only: token 11 + position with a margin so large
    that the softmax is exactly 1.0 in float32 (a model certain of every slot, masked or not)."""

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        super().__call__(tokens, positions, cache, attention_mask, logits_from)
        logits = torch.full((*tokens.shape, self.config.vocab_size), -100.0)
        logits.scatter_(2, (positions + 11)[..., None] % self.config.vocab_size, 100.0)
        return logits[:, logits_from:]


def test_threshold_one_commits_whole_blocks_when_the_model_is_certain():
    m = CertainModel(lambda h: 0, vocab=64)
    ar = suite.generate(m, torch.tensor([[10]]), decoder="ar", max_new_tokens=12)
    out = suite.generate(m, torch.tensor([[10]]), decoder=BlockDiffusion(block_size=4, threshold=1.0, mask_token_id=MASK_ID),
                         max_new_tokens=12)
    assert out.new_tokens == ar.new_tokens == [list(range(11, 23))]
    assert out.stats.num_forwards == 3      # every slot certain: 4 tokens per forward


def test_low_threshold_needs_fewer_forwards_and_respects_budget(model):
    out = run(model, BlockDiffusion(block_size=4, threshold=0.0, mask_token_id=MASK_ID))
    assert out.stats.num_forwards == NEW // 4          # every forward commits a full block
    assert all(len(n) == NEW for n in out.new_tokens)


def test_s2d2_is_lossless(model):
    ar = run(model, "ar")
    for route in (0.0, 0.5):
        out = run(model, S2D2(block_size=4, route_threshold=route, mask_token_id=MASK_ID))
        assert torch.equal(out.sequences, ar.sequences), route
        assert out.stats.num_forwards <= ar.stats.num_forwards


def test_eos_inside_a_block_stops_like_ar():
    model = tiny_model("llama")
    ar = suite.generate(model, PROMPTS[:1], max_new_tokens=NEW)
    eos = ar.new_tokens[0][6]
    first = ar.new_tokens[0].index(eos)
    for dec in (S2D2(block_size=4, mask_token_id=MASK_ID), BlockDiffusion(block_size=1, mask_token_id=MASK_ID)):
        out = suite.generate(model, PROMPTS[:1], decoder=dec, max_new_tokens=NEW, eos_token_id=eos)
        assert out.new_tokens[0] == ar.new_tokens[0][:first + 1]
    bd = suite.generate(model, PROMPTS[:1], decoder=BlockDiffusion(block_size=4, threshold=0.0, mask_token_id=MASK_ID),
                        max_new_tokens=NEW, eos_token_id=eos)
    assert bd.new_tokens[0][-1] == eos or len(bd.new_tokens[0]) == NEW


def test_block_mask_layout():
    m = block_mask(3, 2, "cpu")
    assert m[:3, :3].equal(torch.ones(3, 3, dtype=torch.bool).tril())
    assert not m[:3, 3:].any()            # clean slots never see noisy ones
    assert m[3:, :].all()                 # noisy slots see the clean past and each other


def test_missing_mask_token_is_a_clear_error():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="mask_token_id"):
        suite.generate(model, PROMPTS[:1], decoder=BlockDiffusion(block_size=4), max_new_tokens=4)
    with pytest.raises(ValueError, match="block_size"):
        suite.generate(model, PROMPTS[:1], decoder=BlockDiffusion(block_size=0, mask_token_id=3), max_new_tokens=4)


def test_ngram_prior_is_lossless_and_uses_the_prior(model):
    from suite.decoders.chain.ngram_prior import NgramPrior
    ar = suite.generate(model, PROMPTS[:1], max_new_tokens=NEW)
    previous = suite.RequestInputs(prior_tokens=(PROMPTS[0].tolist() + ar.new_tokens[0],))
    _, dec, state = suite.prepare(model, PROMPTS[:1], decoder=NgramPrior(), max_new_tokens=NEW, inputs=previous)
    out = suite.decode(suite.as_adapter(model), dec, state)
    assert out.new_tokens == ar.new_tokens
    assert out.stats.num_forwards < NEW // 2


def test_prefix_only_fills_just_the_confident_run_after_the_head(model):
    ar = run(model, "ar")
    never = run(model, BlockDiffusion(block_size=4, threshold=1.01, prefix_only=True, mask_token_id=MASK_ID))
    assert torch.equal(never.sequences, ar.sequences)
    m = CertainModel(lambda h: 0, vocab=64)
    out = suite.generate(m, torch.tensor([[10]]), max_new_tokens=12,
                         decoder=BlockDiffusion(block_size=4, threshold=1.0, prefix_only=True, mask_token_id=MASK_ID))
    assert out.new_tokens == [list(range(11, 23))] and out.stats.num_forwards == 3
    # a model unsure of every other slot: the default fills the sure slots ahead of the gaps,
    # prefix_only never leaves a filled slot ahead of the committed prefix; both read like ar
    m = HalfSureModel(lambda h: 0, vocab=64)
    for prefix_only, ahead in ((False, True), (True, False)):
        dec = BlockDiffusion(block_size=4, threshold=0.5, prefix_only=prefix_only, mask_token_id=MASK_ID)
        _, dec, state = suite.prepare(m, torch.tensor([[10]]), decoder=dec, max_new_tokens=12)
        filled = [any(row.filled for row in state.rows) for _ in suite.decode_steps(m, dec, state)]
        assert any(filled) == ahead
        assert state.new_tokens(0) == list(range(11, 23))


class HalfSureModel(CertainModel):
    """Like CertainModel, but unsure (confidence ~0.04, same argmax) at odd positions."""

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        logits = super().__call__(tokens, positions, cache, attention_mask, logits_from)
        odd = (positions[:, logits_from:] % 2 == 1)[..., None]
        return torch.where(odd, logits.clamp(min=0) / 100, logits)
