"""The diffusion-LM commit rules beside block_diffusion (fast_dllm_factor, prophet, credit,
entropy_bounded): each rule's commit law on a scripted model whose slot probabilities are known,
and each rule's never-commit setting equal to `ar` on tiny random transformers."""
import dataclasses
import math

import pytest
import torch
from scripted import ScriptedModel
from tinymodels import tiny_model

import suite
from suite.decoders.blocks.block_diffusion import BlockDiffusion, repeats
from suite.decoders.blocks.credit import CreditDecoding
from suite.decoders.blocks.entropy_bounded import EntropyBounded, entropy_bounded_commit
from suite.decoders.blocks.fast_dllm_factor import FastDLLMFactor, factor_commit
from suite.decoders.blocks.prophet import Prophet

MASK_ID, VOCAB = 3, 64


class KnownProbs(ScriptedModel):
    """The slot predicting position q puts probability conf[q] (default 1) on token 10 + q, the
    rest on its runner-up 11 + q, whatever the context: greedy AR reads 11, 12, ... from prompt [10]."""

    def __init__(self, conf: dict[int, float]):
        super().__init__(lambda h: 0, vocab=VOCAB)
        self.conf = conf

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        super().__call__(tokens, positions, cache, attention_mask, logits_from)
        probs = torch.zeros(*tokens.shape, VOCAB)
        for r in range(tokens.shape[0]):
            for i, p in enumerate(positions[r].tolist()):
                c = self.conf.get(p + 1, 1.0)
                probs[r, i, (p + 11) % VOCAB] = c
                probs[r, i, (p + 12) % VOCAB] = 1 - c
        return probs.clamp_min(1e-30).log()[:, logits_from:]


def commits(decoder, conf, new=8):
    """Per forward, the target positions the rule filled; and the tokens decoded (prompt [10])."""
    model, seen = KnownProbs(conf), []
    rule = type(decoder).commit

    class Recorded(type(decoder)):
        def commit(self, state, b, slots):
            keep = rule(self, state, b, slots)
            seen.append(sorted(q for q, k in zip(slots.positions, keep.tolist()) if k))
            return keep
    out = suite.generate(model, torch.tensor([[10]]), max_new_tokens=new,
                         decoder=Recorded(**{**decoder.__dict__, "mask_token_id": MASK_ID}))
    return seen, out.new_tokens[0]


AR_TEXT = list(range(11, 19))


def test_threshold_rule_fills_every_slot_at_or_above_the_threshold():
    seen, text = commits(BlockDiffusion(block_size=4, threshold=0.9), {2: 0.95, 3: 0.6, 4: 0.9})
    assert seen[0] == [1, 2, 4] and text == AR_TEXT


def test_factor_rule_raises_the_bar_with_the_number_committed():
    # head + n slots: the k-th most confident slot joins when its confidence >= 1 - factor / (k + 2)
    assert factor_commit(torch.tensor([1.0, 0.9, 0.8, 0.6]), 1.0).tolist() == [True, True, True, False]
    assert factor_commit(torch.tensor([1.0, 0.7, 0.8, 0.6]), 1.0).tolist() == [True, False, True, False]
    assert factor_commit(torch.tensor([1.0, 0.7, 0.8, 0.6]), 0.5).tolist() == [True, False, False, False]
    assert factor_commit(torch.tensor([0.2, 0.9]), 0.0).tolist() == [True, False]      # 0: the head alone
    # 0.8 >= 1 - 1/3 joins; then 0.74 < 1 - 1/4 stops it although a 0.7 threshold would take both
    seen, text = commits(FastDLLMFactor(block_size=4, factor=1.0), {2: 0.74, 3: 0.8, 4: 0.6})
    assert seen[0] == [1, 3] and text == AR_TEXT


def test_prophet_goes_all_in_when_the_mean_top2_gap_is_large():
    gap = math.log(0.97 / 0.03)                    # 3.48: log-odds of a slot at 0.97
    conf = {2: 0.97, 3: 0.97, 4: 0.6}              # mean gap (3.48 + 3.48 + 0.41) / 3 = 2.46
    seen, text = commits(Prophet(block_size=4, margin=2.4, threshold=0.95), conf)
    assert seen[0] == [1, 2, 3, 4] and text == AR_TEXT          # the 0.6 slot comes in with the rest
    seen, text = commits(Prophet(block_size=4, margin=2.5, threshold=0.95), conf)
    assert seen[0] == [1, 2, 3] and text == AR_TEXT                     # below the margin: the threshold
    assert gap > 2.5


def test_credit_lets_a_value_predicted_forward_after_forward_through():
    # 0.8 < threshold 0.9 alone; position 4 is scored by two forwards before it would be the head
    conf = {2: 0.55, 3: 0.55, 4: 0.8}
    seen, _ = commits(BlockDiffusion(block_size=4, threshold=0.9), conf)
    assert seen[:2] == [[1], [2, 5]]
    seen, text = commits(CreditDecoding(block_size=4, threshold=0.9, alpha=1.0, decay=0.7, power=0.5), conf)
    # forward 1: credit 0.8^0.5 = 0.894, fused p = 0.8 * 1.894 / (0.8 * 1.894 + 0.2) = 0.883 < 0.9
    # forward 2: credit 0.7 * 0.894 + 0.894 = 1.521, fused p = 0.8 * 2.521 / (0.8 * 2.521 + 0.2) = 0.910
    assert seen[:2] == [[1], [2, 4, 5]] and text == AR_TEXT
    seen, _ = commits(CreditDecoding(block_size=4, threshold=0.9, alpha=0.0), conf)   # no credit: the threshold
    assert seen[:2] == [[1], [2, 5]]


def test_entropy_bounded_spends_a_shared_budget_lowest_entropy_first():
    def h(c):
        return -(c * math.log(c) + (1 - c) * math.log(1 - c))
    assert entropy_bounded_commit(torch.tensor([0.0, 0.3, 0.1, 0.2]), 0.35).tolist() == [True, True, True, True]
    assert entropy_bounded_commit(torch.tensor([0.0, 0.3, 0.1, 0.2]), 0.25).tolist() == [True, False, True, True]
    # entropies: head 0, then h(0.99) = 0.056, h(0.98) = 0.098, h(0.9) = 0.325 (nats); with all
    # three in, sum - max = 0.154
    conf = {2: 0.99, 3: 0.9, 4: 0.98}
    assert abs(h(0.99) + h(0.98) - 0.154) < 1e-3
    seen, _ = commits(EntropyBounded(block_size=4, gamma=0.2), conf)
    assert seen[0] == [1, 2, 3, 4]                 # the largest entropy is not counted
    seen, text = commits(EntropyBounded(block_size=4, gamma=0.1), conf)
    assert seen[0] == [1, 2, 4] and text == AR_TEXT   # 0.154 > 0.1: the 0.9 slot waits


class CopyingSlots(ScriptedModel):
    """Clean slots read FULL (a doubled 13 at positions 3 and 4); the MASK slot predicting position 2
    writes position 1's token there instead (a misplaced copy of the glyph before); confidence 0.99."""
    FULL = [10, 11, 12, 13, 13, 14, 15, 16, 17]

    def __init__(self):
        super().__init__(lambda h: 0, vocab=VOCAB)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        super().__call__(tokens, positions, cache, attention_mask, logits_from)
        probs = torch.zeros(*tokens.shape, VOCAB)
        for r in range(tokens.shape[0]):
            for i, p in enumerate(positions[r].tolist()):
                q = p + 1
                t = self.FULL[1 if q == 2 and int(tokens[r, i]) == MASK_ID else q] if q < len(self.FULL) else 30 + q
                probs[r, i, t], probs[r, i, (t + 7) % VOCAB] = 0.99, 0.01
        return probs.clamp_min(1e-30).log()[:, logits_from:]


def test_hold_repeats_keeps_a_slot_copying_the_token_before_it_for_a_later_forward():
    """Forward 1 fills 1..4 = 11 11 13 13 by the threshold; with hold_repeats positions 2 (a copy of
    1) and 4 (a copy of 3, here right) wait: 12 comes as the head of forward 2, with the filled 13;
    the doubled 13 as the head of forward 3, with 14 15 16; 17 in forward 4."""
    ar = suite.generate(CopyingSlots(), torch.tensor([[10]]), max_new_tokens=8)
    assert ar.new_tokens[0] == CopyingSlots.FULL[1:]
    plain = BlockDiffusion(block_size=4, threshold=0.9, mask_token_id=MASK_ID)
    out = suite.generate(CopyingSlots(), torch.tensor([[10]]), decoder=plain, max_new_tokens=8)
    assert out.new_tokens[0][:4] == [11, 11, 13, 13]                     # the copy is committed
    for rule in (plain, FastDLLMFactor(block_size=4, factor=1.0, mask_token_id=MASK_ID)):
        held = dataclasses.replace(rule, hold_repeats=True)
        out = suite.generate(CopyingSlots(), torch.tensor([[10]]), decoder=held, max_new_tokens=8)
        assert out.new_tokens[0] == ar.new_tokens[0] and out.stats.num_forwards == 4, rule.name


def test_repeats_compares_with_committed_filled_and_kept_neighbours():
    positions, tokens, keep = [5, 6, 8, 9], [7, 7, 9, 9], [True, True, False, True]
    # head 7 at 5 (never held); 7 at 6 repeats it; 8 is not kept; 9 at 9 repeats the 9 filled at 8
    assert repeats(4, 4, {8: 9}, positions, tokens, keep) == [False, True, False, True]
    assert repeats(7, 4, {}, positions, tokens, keep) == [False, True, False, False]


PROMPTS = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11], [0, 0, 0, 20, 21, 22, 20, 21, 23, 24]])
MASK = (torch.arange(10)[None] >= torch.tensor([[0], [3]])).long()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_rules_that_commit_only_the_head_are_ar(arch):
    model = tiny_model(arch)
    ar = suite.generate(model, PROMPTS, attention_mask=MASK, max_new_tokens=12)
    for dec in (FastDLLMFactor(block_size=4, factor=0.0, mask_token_id=MASK_ID),
                Prophet(block_size=4, margin=math.inf, threshold=1.01, mask_token_id=MASK_ID),
                CreditDecoding(block_size=4, threshold=1.01, mask_token_id=MASK_ID),
                EntropyBounded(block_size=4, gamma=0.0, mask_token_id=MASK_ID)):
        out = suite.generate(model, PROMPTS, attention_mask=MASK, decoder=dec, max_new_tokens=12)
        assert torch.equal(out.sequences, ar.sequences), dec.name
        assert out.stats.num_forwards == ar.stats.num_forwards, dec.name


def test_bad_options_are_clear_errors():
    model = KnownProbs({})
    for dec, word in ((FastDLLMFactor(factor=-1), "factor"), (Prophet(margin=-1), "margin"),
                      (CreditDecoding(decay=2), "decay"), (EntropyBounded(gamma=-1), "gamma")):
        with pytest.raises(ValueError, match=word):
            suite.generate(model, torch.tensor([[10]]), decoder=type(dec)(**{**dec.__dict__, "mask_token_id": MASK_ID}),
                           max_new_tokens=4)
