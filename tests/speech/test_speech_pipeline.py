"""The TTS pipeline on tiny random models: API shape, step counts by decoder, streaming."""
from __future__ import annotations

import pytest
import torch

from speech.alignment import PHONES
from speech.codec import Codec, CodecConfig
from speech.tts import TTS
from speech.tts_model import TTSConfig, TTSModel

SYMBOLS = " ".join(PHONES)


@pytest.fixture(scope="module")
def tiny_tts():
    torch.manual_seed(0)
    codec = Codec(CodecConfig(channels=16, codebook_size=16, latent_dim=8)).eval()
    common = dict(num_codebooks=4, codebook_size=16, hidden_size=32, num_layers=2, num_heads=2, symbols=SYMBOLS)
    frame = TTSModel(TTSConfig(layout="frame", local_layers=1, local_hidden=16, stack_frames=2, duration_hidden=16,
                               **common)).eval()
    flat = TTSModel(TTSConfig(layout="flat", **common)).eval()
    return TTS(frame, codec, flat)


@pytest.mark.parametrize("decoder", ["flat", "delay", "parallel", "local_ar", "local_maskgit", "stack"])
def test_tts_result_shape_and_forward_counts(tiny_tts, decoder):
    res = tiny_tts("Hello there.", decoder=decoder, seed=1, max_seconds=0.3)
    q, t = res.codes.shape
    assert q == 4 and res.sample_rate == 16000 and res.audio.ndim == 1
    assert res.codes.max() < 16 and res.codes.min() >= 0
    if t:
        assert abs(len(res.audio) - t * 320) <= 320
    expected = {"flat": t * q + 1, "delay": t + q - 1, "stack": t // 2 + 1}.get(decoder, t + 1)
    # a random model may run out of budget before EOS: then it is one step short of the EOS step
    assert res.stats.num_forwards in (expected, expected - 1)


@pytest.mark.parametrize("frames, samples", [(0, 0), (1, 160), (2, 480), (3, 800)])
def test_codec_decodes_very_short_outputs(tiny_tts, frames, samples):
    """A model may end after 0 or 1 frames: the codec still returns (2T - 1) x 160 samples, no error."""
    assert tiny_tts.codec.decode(torch.zeros(1, 4, frames, dtype=torch.long)).shape == (1, samples)


def test_same_seed_same_audio(tiny_tts):
    a = tiny_tts("Hello.", decoder="parallel", seed=3, max_seconds=0.3)
    b = tiny_tts("Hello.", decoder="parallel", seed=3, max_seconds=0.3)
    assert torch.equal(a.codes, b.codes)


@pytest.mark.parametrize("decoder", ["delay", "stack"])
def test_stream_yields_the_same_frames(tiny_tts, decoder):
    chunks = list(tiny_tts.stream("Hello there.", decoder=decoder, seed=2, max_seconds=0.3, chunk_frames=4))
    full = tiny_tts("Hello there.", decoder=decoder, seed=2, max_seconds=0.3)
    assert len(chunks) >= 2
    assert abs(sum(len(c) for c in chunks) - len(full.audio)) <= 320 * len(chunks)


def test_tts_bad_decoder_and_limits(tiny_tts):
    with pytest.raises(ValueError, match="choose one of"):
        tiny_tts("Hello.", decoder="beam")
    with pytest.raises(ValueError, match="max_seconds"):
        tiny_tts("Hello.", max_seconds=100)
    with pytest.raises(ValueError, match="empty"):
        tiny_tts("   ")


def test_tts_without_heads_lists_and_refuses_their_decoders(tiny_tts):
    plain = TTSModel(TTSConfig(num_codebooks=4, codebook_size=16, hidden_size=32, num_layers=1, num_heads=2,
                               symbols=SYMBOLS, duration_hidden=16)).eval()
    tts = TTS(plain, tiny_tts.codec)
    assert tts.decoders == ("delay", "parallel") and tiny_tts.decoders[-3:] == ("local_ar", "local_maskgit", "stack")
    with pytest.raises(ValueError, match="speech.train tts"):
        tts("Hello.", decoder="local_ar")
    with pytest.raises(ValueError, match="tts_stack.*speech.train tts-stack"):
        tiny_tts("Hello.", decoder="stack_local")


def test_stack_local_runs_on_the_stack_checkpoint(tiny_tts):
    """stack_local needs tts_stack's two-frame local transformer: floor(T / 2) + 1 backbone
    forwards, all on that checkpoint; the frame model still sets the alignment."""
    torch.manual_seed(3)
    own = TTSModel(TTSConfig(num_codebooks=4, codebook_size=16, hidden_size=32, num_layers=1, num_heads=2,
                             symbols=SYMBOLS, stack_frames=2, local_layers=1, local_hidden=16, local_frames=2)).eval()
    tts = TTS(tiny_tts.frame.model, tiny_tts.codec, stack_model=own)
    assert tts.decoders[-2:] == ("stack", "stack_local")
    calls = []
    own.hidden = lambda *a, f=own.hidden: calls.append(1) or f(*a)
    res = tts("Hello there.", decoder="stack_local", seed=2, max_seconds=0.3)
    q, t = res.codes.shape
    assert q == 4 and res.codes.max() < 16 and len(calls) == res.stats.num_forwards
    assert res.stats.num_forwards in (t // 2 + 1, t // 2)
    assert t >= 2
    chunks = list(tts.stream("Hello there.", decoder="stack_local", seed=2, max_seconds=0.3, chunk_frames=t // 2))
    assert len(chunks) >= 2 and abs(sum(len(c) for c in chunks) - len(res.audio)) <= 320 * len(chunks)


@pytest.mark.parametrize("decoder", ["delay", "stack"])
def test_a_dedicated_checkpoint_takes_its_decoder(tiny_tts, decoder):
    """A checkpoint trained for one decoder (tts_delay, tts_stack) takes that decoder's forwards;
    every other decoder and the alignment (the frame model's durations) stay on the frame model."""
    torch.manual_seed(1)
    own = TTSModel(TTSConfig(num_codebooks=4, codebook_size=16, hidden_size=32, num_layers=1, num_heads=2,
                             symbols=SYMBOLS, stack_frames=2 if decoder == "stack" else 1)).eval()
    tts = TTS(tiny_tts.frame.model, tiny_tts.codec, **{f"{decoder}_model": own})
    calls = []
    own.hidden = lambda *a, f=own.hidden: calls.append(1) or f(*a)
    res = tts("Hello there.", decoder=decoder, seed=1, max_seconds=0.3)
    assert len(calls) == res.stats.num_forwards > 0
    tts("Hello there.", decoder="parallel", seed=1, max_seconds=0.3)
    assert len(calls) == res.stats.num_forwards
    assert tiny_tts.delay is tiny_tts.frame and tiny_tts.stack is tiny_tts.heads["stack"]   # none given


def test_griffin_lim_is_the_same_whatever_other_threads_decode():
    """The codec's phase reconstruction starts from a random phase of its own: the same audio when several
    threads decode at once (a shared global seed raced: one of the batch CLI's WAVs came out a different
    waveform), and the process's RNG stream untouched."""
    import threading

    from speech.features import griffin_lim
    spectra = [torch.randn(257, 40, generator=torch.Generator().manual_seed(i)) * 0.5 for i in range(4)]
    alone = [griffin_lim(s, n_iter=4) for s in spectra]
    torch.manual_seed(5)
    expected_draw = torch.rand(3)
    torch.manual_seed(5)
    start, results = threading.Barrier(len(spectra) * 2), {}

    def decode(key: int) -> None:
        start.wait()
        for _ in range(3):
            results.setdefault(key, []).append(griffin_lim(spectra[key % len(spectra)], n_iter=4))

    threads = [threading.Thread(target=decode, args=(k,)) for k in range(len(spectra) * 2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(torch.equal(audio, alone[k % len(spectra)]) for k, outs in results.items() for audio in outs)
    assert torch.equal(torch.rand(3), expected_draw)
