"""local_ar, local_maskgit, stack and stack_local: scripted adapters (exact step counts,
conditioning, EOS) and a tiny random TTS with a local transformer and stacked heads (exactness
against uncached references)."""
from __future__ import annotations

import pytest
import torch

from suite import AdapterConfig, DecodeState, KVCache, SamplingParams, decode
from suite.decoders.frames.base import LocalHeadOutput
from suite.decoders.frames.local_ar import LocalAR
from suite.decoders.frames.local_maskgit import LocalMaskGIT, fixed_after
from suite.decoders.frames.parallel import Parallel
from suite.decoders.frames.stack import Stack
from suite.decoders.frames.stack_local import StackLocal
from speech.alignment import frame_conditioning
from tinymodels import tiny_tts
from speech.tts_model import FrameTTSAdapter, TTSConfig, TTSModel
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

Q, C = 4, 16
BOS, EOS, PAD = C, C + 1, C + 2
MASK = C + 2          # the local transformer's MASK id (= out_vocab)
END = (EOS,) * Q


class _NoBackend:
    layers: list = []

    def crop(self, n):
        pass


class _Scripted(AdapterBase):
    capabilities = Capabilities(custom_mask=True)

    def __init__(self, audio_start: int, eos_at: int, output: str):
        self.audio_start, self.eos_at, self.forwards = audio_start, eos_at, 0
        self.config = AdapterConfig(vocab_size=C + 2, eos_token_ids=frozenset({END}), pad_token_id=PAD,
                                    extra={"codebooks": Q, "bos": BOS, "eos": EOS, "pad": PAD, "output": output})

    def new_cache(self, batch, max_len=None):
        return KVCache(batch, _NoBackend())

    def index(self, positions, logits_from):
        """(B, N') index j of the frame each query predicts (j = position - BOS position)."""
        return positions[:, logits_from:] - self.audio_start


class ScriptedLocal(_Scripted):
    """hidden = j. ar: codebook q peaks at (7j + q + sum of codes < q) mod C; maskgit: codebook q
    peaks at (7j + q) mod C with confidence falling in q. EOS on codebook 0 at j = eos_at."""

    def __init__(self, audio_start, eos_at):
        super().__init__(audio_start, eos_at, "local")
        self.local_passes = 0

    def __call__(self, tokens, positions, cache, attention_mask, logits_from=0):
        self.forwards += 1
        return LocalHeadOutput(self.index(positions, logits_from).float()[..., None], self.local, MASK)

    def local(self, h, codes, mode):
        self.local_passes += 1
        logits = torch.full((h.shape[0], Q, C + 2), -10.0)
        for m, j in enumerate(h[:, 0].long().tolist()):
            for q in range(Q):
                if q == 0 and j == self.eos_at:
                    logits[m, q, EOS] = 10.0
                elif mode == "ar" and (codes[m, :q] == MASK).any():
                    logits[m, q, C - 1] = 10.0                  # not decidable yet: a decoy
                elif mode == "ar":
                    logits[m, q, (7 * j + q + int(codes[m, :q].sum())) % C] = 10.0
                else:
                    logits[m, q, (7 * j + q) % C] = 10.0 - q
        return logits


class ScriptedStackLocal(_Scripted):
    """A local transformer over 2 frames: hidden = j; code slot i (frame j + i // Q, codebook i % Q)
    peaks at (7j + i + sum of the codes before slot i) mod C, so the second frame depends on the
    first; EOS on codebook 0 of frame j + s when j + s = eos_at."""

    def __init__(self, audio_start, eos_at, frames=2):
        super().__init__(audio_start, eos_at, "local")
        self.frames, self.local_passes = frames, 0

    def __call__(self, tokens, positions, cache, attention_mask, logits_from=0):
        self.forwards += 1
        return LocalHeadOutput(self.index(positions, logits_from).float()[..., None], self.local, MASK, self.frames)

    def local(self, h, codes, mode):
        self.local_passes += 1
        n = codes.shape[1]
        logits = torch.full((h.shape[0], n, C + 2), -10.0)
        for m, j in enumerate(h[:, 0].long().tolist()):
            for i in range(n):
                if i % Q == 0 and j + i // Q == self.eos_at:
                    logits[m, i, EOS] = 10.0
                elif (codes[m, :i] == MASK).any():
                    logits[m, i, C - 1] = 10.0                  # not decidable yet: a decoy
                else:
                    logits[m, i, (7 * j + i + int(codes[m, :i].sum())) % C] = 10.0
        return logits


def _stack_local_frames(frames: int) -> list[tuple]:
    """What ScriptedStackLocal's greedy decode commits: pairs of frames from one state each."""
    out = []
    for j in range(0, frames, 2):
        codes = []
        for i in range(2 * Q):
            if i % Q == 0 and j + i // Q == frames:
                break
            codes.append((7 * j + i + sum(codes)) % C)
        out += [tuple(codes[k:k + Q]) for k in range(0, len(codes), Q)]
    return out


class ScriptedStack(_Scripted):
    """Frame s of the stack predicts frame j + s: code (7(j+s) + k) mod C, EOS when j + s = eos_at."""

    def __init__(self, audio_start, eos_at):
        super().__init__(audio_start, eos_at, "stack")

    def __call__(self, tokens, positions, cache, attention_mask, logits_from=0):
        self.forwards += 1
        idx = self.index(positions, logits_from)
        b, n = idx.shape
        logits = torch.full((b, n, 2, Q, C + 2), -10.0)
        for r in range(b):
            for i in range(n):
                for s in range(2):
                    j = int(idx[r, i]) + s
                    for k in range(Q):
                        logits[r, i, s, k, EOS if (k == 0 and j == self.eos_at) else (7 * j + k) % C] = 10.0
        return logits


def _state(model, prompt_len=4, budget=200, params=SamplingParams()):
    prompt = [(C + 5,) + (PAD,) * (Q - 1)] * (prompt_len - 1) + [(BOS,) * Q]
    return DecodeState(tokens=[prompt], cache=model.new_cache(1), params=params, max_new_tokens=budget,
                       eos_token_ids=model.config.eos_token_ids)


def _frames(new_tokens) -> list[tuple]:
    return [f for f in new_tokens if f != END]


@pytest.mark.parametrize("frames", [1, 6])
def test_local_ar_one_backbone_forward_and_q_local_passes_per_frame(frames):
    model = ScriptedLocal(audio_start=3, eos_at=frames)
    state = _state(model)
    result = decode(model, LocalAR().bind(model), state)
    assert result.new_tokens[0][-1] == END
    assert model.forwards == state.stats.num_forwards == frames + 1
    assert model.local_passes == Q * (frames + 1)
    expected = []
    for j in range(frames):
        frame = []
        for q in range(Q):
            frame.append((7 * j + q + sum(frame)) % C)
        expected.append(tuple(frame))
    assert _frames(result.new_tokens[0]) == expected


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_local_maskgit_passes_and_codes(steps):
    model = ScriptedLocal(audio_start=3, eos_at=5)
    state = _state(model)
    result = decode(model, LocalMaskGIT(steps=steps).bind(model), state)
    assert state.stats.num_forwards == 6 and model.local_passes == steps * 6
    assert _frames(result.new_tokens[0]) == [tuple((7 * j + q) % C for q in range(Q)) for j in range(5)]


def test_maskgit_cosine_schedule():
    assert [fixed_after(s, 2, 4) for s in (1, 2)] == [1, 4]
    assert [fixed_after(s, 4, 4) for s in (1, 2, 3, 4)] == [1, 2, 3, 4]
    assert fixed_after(1, 1, 4) == 4
    model = ScriptedLocal(3, 2)
    with pytest.raises(ValueError, match="steps"):
        decode(model, LocalMaskGIT(steps=5).bind(model), _state(model))


@pytest.mark.parametrize("frames, forwards", [(1, 1), (2, 2), (4, 3), (5, 3), (12, 7)])
def test_stack_halves_the_forwards(frames, forwards):
    """T frames take floor(T / 2) + 1 forwards (parallel: T + 1); EOS in either slot ends the row."""
    model = ScriptedStack(audio_start=3, eos_at=frames)
    state = _state(model)
    result = decode(model, Stack().bind(model), state)
    assert state.stats.num_forwards == forwards
    assert result.new_tokens[0][-1] == END
    assert _frames(result.new_tokens[0]) == [tuple((7 * j + k) % C for k in range(Q)) for j in range(frames)]


@pytest.mark.parametrize("frames, forwards", [(1, 1), (2, 2), (5, 3), (12, 7)])
def test_stack_local_two_frames_per_forward_second_sees_first(frames, forwards):
    """stack_local: floor(T / 2) + 1 backbone forwards, 2Q local passes each; the second frame's
    codes are sampled after (and given) the first frame's; EOS in either frame ends the row."""
    model = ScriptedStackLocal(audio_start=3, eos_at=frames)
    state = _state(model)
    result = decode(model, StackLocal().bind(model), state)
    assert state.stats.num_forwards == model.forwards == forwards
    assert model.local_passes == 2 * Q * forwards
    assert result.new_tokens[0][-1] == END
    assert _frames(result.new_tokens[0]) == _stack_local_frames(frames)


def test_stack_local_needs_a_two_frame_local_transformer():
    model = ScriptedStackLocal(audio_start=3, eos_at=4, frames=1)
    with pytest.raises(ValueError, match="speech.train tts-stack"):
        decode(model, StackLocal().bind(model), _state(model))


def test_stack_respects_the_budget():
    model = ScriptedStack(audio_start=3, eos_at=50)
    state = _state(model, budget=5)
    result = decode(model, Stack().bind(model), state)
    assert len(result.new_tokens[0]) == 5 and state.stats.num_forwards == 3


def test_decoders_check_the_adapter_output():
    with pytest.raises(ValueError, match="'local'"):
        LocalAR().bind(ScriptedStack(3, 2))
    with pytest.raises(ValueError, match="'stack'"):
        Stack().bind(ScriptedLocal(3, 2))
    with pytest.raises(ValueError, match="'frame'"):
        Parallel().bind(ScriptedLocal(3, 2))


# ---------------------------------------------------------------- a tiny random TTS with the heads

def _tiny_run(model, output, decoder, params, budget=6):
    cfg = model.config
    adapter = FrameTTSAdapter(model, output)
    prompt = [(cfg.parallel_token,) + (cfg.pad,) * (Q - 1), (cfg.bos,) * Q]
    adapter = adapter.for_request([len(prompt) - 1], [frame_conditioning(cfg.phone_ids("a b c a".split()), [2, 1, 0, 3], 3)])
    state = DecodeState(tokens=[list(prompt)], cache=adapter.new_cache(1), params=params, max_new_tokens=budget,
                        eos_token_ids=adapter.config.eos_token_ids)
    return adapter, prompt, state, decode(adapter, decoder.bind(adapter), state).new_tokens[0]


def _full_hidden(model, adapter, frames):
    """The backbone's last state over the whole sequence, without any cache (D,)."""
    tokens = torch.tensor([list(f) for f in frames])[None]
    positions = torch.arange(len(frames))[None]
    rows = adapter.request_inputs          # the request's BOS position and conditioning, as its cache carries them
    cond = model.condition_ids(positions, rows["audio_start"][:, 0], rows["tables"], rows["table_lengths"][:, 0])
    return model.hidden(tokens, cond, positions)[0, -1]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_local_ar_equals_uncached_reference(temperature):
    """Exact: local_ar = ancestral sampling of prod_q p(c_q | h, c_<q) with h from a full
    uncached forward, token for token (greedy; and sampling with the same random stream)."""
    from suite.random_streams import SAMPLE, RowStreams
    from suite.sampling import logits_to_probs, sample
    model = tiny_tts()
    params = SamplingParams(temperature=temperature, seed=5)
    adapter, prompt, state, got = _tiny_run(model, "local", LocalAR(), params)
    stream = RowStreams.seeded(5, 1, "cpu")        # the row's stream: frame position, draw = codebook
    seq, want = list(prompt), []
    cfg = model.config
    with torch.no_grad():
        while len(want) < 6:
            h = _full_hidden(model, adapter, seq)[None]
            codes = torch.full((1, Q), cfg.out_vocab, dtype=torch.long)
            for q in range(Q):
                logits = model.local_logits(h, codes, "ar")[0, q]
                if q > 0:
                    logits[cfg.eos] = float("-inf")
                codes[0, q] = sample(logits_to_probs(logits, params), stream.uniform([[len(seq)]], SAMPLE, q))
            frame = tuple(codes[0].tolist())
            if frame[0] == cfg.eos:
                want.append((cfg.eos,) * Q)
                break
            want.append(frame)
            seq.append(frame)
    assert got == want and len(got) >= 2


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stack_local_equals_uncached_reference(temperature):
    """Exact: stack_local = ancestral sampling of prod_j p(c_j | h, c_<j) over the 2Q codes of two
    frames, h from a full uncached forward every second frame, token for token (greedy; and
    sampling with the same random stream), in half the backbone forwards."""
    from suite.random_streams import SAMPLE, RowStreams
    from suite.sampling import logits_to_probs, sample
    model = tiny_tts(2, local_frames=2)
    params = SamplingParams(temperature=temperature, seed=7)
    adapter, prompt, state, got = _tiny_run(model, "local", StackLocal(), params, budget=8)
    stream = RowStreams.seeded(7, 1, "cpu")        # the row's stream: first frame's position, draw = code
    cfg = model.config
    seq, want = list(prompt), []
    with torch.no_grad():
        while len(want) < 8 and (not want or want[-1][0] != cfg.eos):
            h = _full_hidden(model, adapter, seq)[None]
            codes = torch.full((1, 2 * Q), cfg.out_vocab, dtype=torch.long)
            for j in range(2 * Q):
                logits = model.local_logits(h, codes, "ar")[0, j]
                if j % Q:
                    logits[cfg.eos] = float("-inf")
                codes[0, j] = sample(logits_to_probs(logits, params), stream.uniform([[len(seq)]], SAMPLE, j))
            for frame in (tuple(codes[0, :Q].tolist()), tuple(codes[0, Q:].tolist())):
                if frame[0] == cfg.eos:
                    want.append((cfg.eos,) * Q)
                    break
                want.append(frame)
                seq.append(frame)
    assert got == want[:8] and len(got) >= 3
    assert state.stats.num_forwards == (len(got) + 1) // 2


def test_local_transformer_reads_a_prefix_of_its_slots():
    """A local transformer spanning two frames, called with the first frame's Q codes only, gives
    the same logits as the first Q slots of a full call (causal): `local_ar` can run on it."""
    model = tiny_tts(3, local_frames=2)
    h, codes = torch.randn(3, 32), torch.randint(0, C + 3, (3, 2 * Q))
    with torch.no_grad():
        full = model.local_logits(h, codes, "ar")
        first = model.local_logits(h, codes[:, :Q], "ar")
    assert full.shape == (3, 2 * Q, C + 2) and torch.allclose(first, full[:, :Q], atol=1e-6)
    with pytest.raises(ValueError, match="spans 8 code slots"):
        model.local(h, torch.zeros(3, 2 * Q + 1, dtype=torch.long), "ar")


def test_stack_equals_uncached_reference():
    """Greedy stack over the cache (2 frames fed per forward) = argmax of the stacked heads on a
    full uncached forward, and it takes half the forwards."""
    model = tiny_tts(1)
    adapter, prompt, state, got = _tiny_run(model, "stack", Stack(), SamplingParams(), budget=8)
    cfg = model.config
    seq, want = list(prompt), []
    with torch.no_grad():
        while len(want) < 8 and (not want or want[-1][0] != cfg.eos):
            logits = model.stack_logits(_full_hidden(model, adapter, seq))           # (2, Q, V)
            logits[:, 1:, cfg.eos] = float("-inf")
            for frame in logits.argmax(-1).tolist():
                want.append(tuple(frame) if frame[0] != cfg.eos else (cfg.eos,) * Q)
                if frame[0] == cfg.eos:
                    break
                seq.append(tuple(frame))
    assert got == want[:8]
    assert state.stats.num_forwards == (len(got) + 1) // 2


def test_stacked_first_frame_is_the_frame_heads():
    model = tiny_tts()
    h = torch.randn(3, 5, 32)
    assert model.stack_logits(h).shape == (3, 5, 2, Q, C + 2)
    assert torch.equal(model.stack_logits(h)[:, :, 0], model.head_logits(h))
    assert model.local_logits(h[0], torch.full((5, Q), C + 2), "maskgit").shape == (5, Q, C + 2)


def test_checkpoint_without_heads_says_how_to_get_them(tmp_path):
    torch.manual_seed(0)
    plain = TTSModel(TTSConfig(num_codebooks=Q, codebook_size=C, hidden_size=32, num_layers=1, num_heads=2,
                               symbols="a b c"))
    with pytest.raises(ValueError, match="speech.train tts"):
        plain.local_logits(torch.zeros(1, 32), torch.zeros(1, Q, dtype=torch.long), "ar")
    with pytest.raises(ValueError, match="speech.train tts"):
        plain.stack_logits(torch.zeros(1, 32))
    plain.save(tmp_path)
    grown = TTSModel.load(tmp_path, local_layers=1, stack_frames=2)     # continue training from the backbone
    assert grown.config.local_layers == 1 and grown.stack_logits(torch.zeros(1, 32)).shape == (1, 2, Q, C + 2)
    assert torch.equal(grown.heads[0].weight, plain.heads[0].weight)


@pytest.mark.parametrize("mode", ["ar", "maskgit"])
def test_local_transformer_fast_eval_path_is_the_same_network(mode):
    """Inference runs the local layers as plain functional calls; they equal nn.TransformerEncoder's."""
    model = tiny_tts()
    h, codes = torch.randn(3, 32), torch.randint(0, C + 3, (3, Q))
    with torch.no_grad():
        fast = model.local_logits(h, codes, mode)
        model.local.train()
        slow = model.local_logits(h, codes, mode)      # dropout is 0: training mode differs only in the path
    assert torch.allclose(fast, slow, atol=1e-5)
    if mode == "ar":    # causal: codebook q ignores the codes at q and after
        later = codes.clone()
        later[:, 2:] = 0
        model.local.eval()
        with torch.no_grad():
            assert torch.allclose(model.local_logits(h, later, mode)[:, :3], fast[:, :3], atol=1e-5)
