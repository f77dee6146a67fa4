"""Speech decoders on scripted and tiny random models: layouts, step counts, exactness."""
from __future__ import annotations

import pytest
import torch

from suite import (AdapterConfig, CTCHypothesis, DecodeState, KVCache, RequestInputs, SamplingParams, decode,
                   prepare)
from suite.decoders.chain.ar import AR
from suite.decoders.chain.ctc_speculative import CTCSpeculative
from suite.decoders.frames.delay import Delay, delay_pattern, undelay
from suite.decoders.frames.parallel import Parallel
from speech.tts_model import TTSConfig, TTSModel, flatten_codes, unflatten_codes
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

Q, C = 4, 16
BOS, EOS, PAD = C, C + 1, C + 2


class _NoBackend:
    layers: list = []

    def crop(self, n):
        pass


class ScriptedFrames(AdapterBase):
    """Frame adapter whose logits depend on position only: the j-th step after BOS predicts
    code (7j + k) mod C on head k, and EOS on head 0 at step `eos_at`."""

    capabilities = Capabilities(custom_mask=True)

    def __init__(self, audio_start: int, eos_at: int):
        self.audio_start, self.eos_at, self.calls = audio_start, eos_at, 0
        self.config = AdapterConfig(vocab_size=C + 2, eos_token_ids=frozenset({(EOS,) * Q}), pad_token_id=PAD,
                                    extra={"codebooks": Q, "bos": BOS, "eos": EOS, "pad": PAD})

    def new_cache(self, batch, max_len=None):
        return KVCache(batch, _NoBackend())

    def __call__(self, tokens, positions, cache, attention_mask, logits_from=0):
        self.calls += 1
        b, n = positions.shape
        logits = torch.full((b, n, Q, C + 2), -10.0)
        for r in range(b):
            for i in range(n):
                j = int(positions[r, i]) - self.audio_start
                for k in range(Q):
                    logits[r, i, k, EOS if (k == 0 and j == self.eos_at) else (7 * j + k) % C] = 10.0
        return logits[:, logits_from:]


def _frame_state(model, prompt_len: int, budget: int = 200):
    prompt = [(C + 5,) + (PAD,) * (Q - 1)] * (prompt_len - 1) + [(BOS,) * Q]
    return DecodeState(tokens=[prompt], cache=model.new_cache(1), params=SamplingParams(), max_new_tokens=budget,
                       eos_token_ids=model.config.eos_token_ids)


def test_delay_pattern_round_trip():
    codes = torch.randint(0, C, (Q, 9))
    cols = delay_pattern(codes, BOS, EOS, PAD)
    assert cols.shape == (Q, 9 + Q)
    assert cols[3, :3].eq(BOS).all() and cols[0, 9] == EOS and cols[2, 11] == EOS and cols[0, 10:].eq(PAD).all()
    assert torch.equal(undelay(cols, 9), codes)


def test_delay_pattern_round_trip_with_other_lags():     # Dia's layout: codebook k lags d_k frames
    lags = (0, 3, 4, 6)                                  # Q = 4
    codes = torch.randint(0, C, (Q, 9))
    cols = delay_pattern(codes, BOS, EOS, PAD, lags)
    assert cols.shape == (Q, 9 + max(lags) + 1)
    assert cols[1, :lags[1]].eq(BOS).all() and cols[1, lags[1]] == codes[1, 0] and cols[1, lags[1] + 9] == EOS
    assert torch.equal(undelay(cols, 9, lags), codes)


def test_flatten_round_trip():
    codes = torch.randint(0, C, (Q, 7))
    flat = flatten_codes(codes, C)
    assert flat[:Q].tolist() == [codes[k, 0] + k * C for k in range(Q)]
    assert torch.equal(unflatten_codes(flat, Q, C), codes)


@pytest.mark.parametrize("frames", [1, 5, 12])
def test_delay_takes_t_plus_k_minus_1_forwards(frames):
    model = ScriptedFrames(audio_start=3, eos_at=frames)
    state = _frame_state(model, 4)
    result = decode(model, Delay().bind(model), state)
    assert state.stats.num_forwards == frames + Q - 1
    cols = [c for c in result.new_tokens[0] if c != (EOS,) * Q]
    codes = undelay(torch.tensor(cols).T, Delay.num_frames(state, 0))
    expected = torch.tensor([[(7 * (t + k) + k) % C for t in range(frames)] for k in range(Q)])
    assert torch.equal(codes, expected)


@pytest.mark.parametrize("frames", [1, 5, 12])
def test_parallel_takes_t_plus_1_forwards(frames):
    model = ScriptedFrames(audio_start=3, eos_at=frames)
    state = _frame_state(model, 4)
    result = decode(model, Parallel().bind(model), state)
    assert state.stats.num_forwards == frames + 1
    got = torch.tensor([f for f in result.new_tokens[0] if f[0] != EOS]).T
    assert torch.equal(got, torch.tensor([[(7 * t + k) % C for t in range(frames)] for k in range(Q)]))


def test_frame_decoders_need_codebook_constants():
    with pytest.raises(ValueError, match="multi-codebook"):
        Delay().bind(object())
    model = ScriptedFrames(3, 2)
    with pytest.raises(ValueError, match="bind"):
        decode(model, Parallel(), _frame_state(model, 4))


def _tiny_frame_model(seed=0):
    torch.manual_seed(seed)
    cfg = TTSConfig(num_codebooks=Q, codebook_size=C, hidden_size=32, num_layers=2, num_heads=2, symbols="a b c")
    return TTSModel(cfg).eval()


def test_frame_model_cached_logits_equal_full_forward():
    """The adapter's incremental (cached) logits equal one full forward over the same frames."""
    from speech.tts_model import FrameTTSAdapter
    model = _tiny_frame_model()
    adapter = FrameTTSAdapter(model)
    cfg = model.config
    from speech.alignment import frame_conditioning
    prompt = [(cfg.parallel_token,) + (cfg.pad,) * (Q - 1), (cfg.bos,) * Q]
    table = frame_conditioning(cfg.phone_ids(["a", "b"]), [2, 2], 3)
    adapter = adapter.for_request([1], [table])
    state = DecodeState(tokens=[list(prompt)], cache=adapter.new_cache(1), params=SamplingParams(temperature=1.0,
                        seed=3), max_new_tokens=6, eos_token_ids=adapter.config.eos_token_ids)
    decode(adapter, Parallel().bind(adapter), state)
    frames = torch.tensor([list(f) for f in state.tokens[0]])[None]
    n = frames.shape[1]
    positions = torch.arange(n)[None]
    with torch.no_grad():
        full = model(frames, model.condition_ids(positions, torch.tensor([1]), [table]), positions)
        cache = adapter.new_cache(1)
        k = n - 1                      # every frame but the last in one forward, then the last one cached
        step = adapter(frames[:, :k], positions[:, :k], cache, None)
        cache.append(positions[:, :k], torch.ones(1, k, dtype=torch.bool))
        nxt = adapter(frames[:, k:n], positions[:, k:n], cache, cache.attention_mask(torch.ones(1, 1, 1, dtype=torch.bool)))
    assert n >= 3                      # the prompt and at least one sampled frame
    assert torch.allclose(step, full[:, :k], atol=1e-5)
    assert torch.allclose(nxt[:, 0], full[:, k], atol=1e-5)


def _tiny_llm(vocab=12, seed=0):
    import transformers as tf
    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = tf.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


@pytest.mark.parametrize("draft_kind", ["ar_output", "wrong_middle", "empty"])
def test_ctc_speculative_without_gate_equals_ar(draft_kind):
    """Gate off (max_entropy=0): verification is lossless, the text equals ar's, in fewer forwards
    when the draft is right."""
    from suite import HFCausalLM
    adapter = HFCausalLM(_tiny_llm(), eos_token_id=11)
    prompt = [1, 2, 3, 4]

    def run(decoder, inputs=None):
        _, dec, state = prepare(adapter, [list(prompt)], decoder=decoder, max_new_tokens=10, inputs=inputs)
        return decode(adapter, dec, state).new_tokens[0], state.stats.num_forwards

    ar_out, ar_forwards = run(AR())
    hyp = [t for t in ar_out if t != 11]
    if draft_kind == "wrong_middle":
        hyp[len(hyp) // 2] = (hyp[len(hyp) // 2] + 1) % 11
    elif draft_kind == "empty":
        hyp = []
    ctc = RequestInputs(ctc=(CTCHypothesis(hyp, torch.ones(5)),))
    out, forwards = run(CTCSpeculative(max_entropy=0.0), ctc)
    assert out == ar_out
    if draft_kind == "ar_output":
        assert forwards == 1 < ar_forwards
    else:
        assert forwards <= ar_forwards


@pytest.mark.parametrize("edit", ["substitute", "insert", "delete", "two_substitutions"])
def test_ctc_speculative_realign_equals_ar_and_recovers_after_one_error(edit):
    """realign=True re-drafts the rest of the CTC hypothesis after a rejection: still ar's text,
    and a single substituted or inserted character costs one extra forward (not AR to the end)."""
    from suite import HFCausalLM
    adapter = HFCausalLM(_tiny_llm(), eos_token_id=11)

    def run(decoder, inputs=None):
        _, dec, state = prepare(adapter, [[1, 2, 3, 4]], decoder=decoder, max_new_tokens=12, inputs=inputs)
        return decode(adapter, dec, state).new_tokens[0], state.stats.num_forwards

    ar_out, ar_forwards = run(AR())
    truth = [t for t in ar_out if t != 11]
    assert len(truth) >= 8
    hyp, i = list(truth), len(truth) // 2
    wrong = next(t for t in range(11) if t not in (truth[i], truth[i + 1]))
    if edit == "substitute":
        hyp[i] = wrong
    elif edit == "insert":
        hyp.insert(i, wrong)
    elif edit == "delete":
        del hyp[i]
    else:
        hyp[i], hyp[i + 3] = wrong, next(t for t in range(11) if t not in (truth[i + 3], truth[i + 4]))
    ctc = RequestInputs(ctc=(CTCHypothesis(hyp, torch.ones(5)),))
    out, forwards = run(CTCSpeculative(max_entropy=0.0, realign=True), ctc)
    plain, plain_forwards = run(CTCSpeculative(max_entropy=0.0), ctc)
    assert out == plain == ar_out
    expected = {"substitute": 2, "insert": 2, "two_substitutions": 3}.get(edit)
    if expected:
        assert forwards == expected < plain_forwards
    assert forwards <= plain_forwards


def test_ctc_speculative_gate_accepts_confident_hypothesis_without_forwards():
    from suite import HFCausalLM
    adapter = HFCausalLM(_tiny_llm(), eos_token_id=11)
    gated = RequestInputs(ctc=(CTCHypothesis([5, 6, 7], torch.full((9,), 0.01)),))
    _, dec, state = prepare(adapter, [[1, 2, 3]], decoder=CTCSpeculative(max_entropy=0.5), max_new_tokens=10,
                            inputs=gated)
    result = decode(adapter, dec, state)
    assert result.new_tokens[0] == [5, 6, 7, 11] and state.stats.num_forwards == 0
    assert state.stats.num_new_tokens == 4 and state.stats.accepted_lengths == []


def test_ctc_speculative_gate_respects_the_budget_and_counts_what_it_commits():
    from suite import HFCausalLM
    adapter = HFCausalLM(_tiny_llm(), eos_token_id=11)
    gated = RequestInputs(ctc=(CTCHypothesis([5, 6, 7, 8, 9], torch.full((9,), 0.01)),))
    _, dec, state = prepare(adapter, [[1, 2, 3]], decoder=CTCSpeculative(max_entropy=0.5), max_new_tokens=3,
                            inputs=gated)
    result = decode(adapter, dec, state)
    assert result.new_tokens[0] == [5, 6, 7] and state.stats.num_new_tokens == 3


def test_ctc_speculative_needs_hypotheses():
    from suite import HFCausalLM
    adapter = HFCausalLM(_tiny_llm(), eos_token_id=11)
    state = DecodeState(tokens=[[1]], cache=adapter.new_cache(1), params=SamplingParams(), max_new_tokens=3)
    with pytest.raises(ValueError, match="inputs.ctc"):
        decode(adapter, CTCSpeculative(), state)
