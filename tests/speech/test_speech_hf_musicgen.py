"""MusicGen through suite (speech/hf_tts.py) on a tiny random MusicgenForConditionalGeneration (T5 text
encoder, EnCodec codec), saved with its processor and reloaded offline: `delay` equals MusicGen's own
greedy `generate` token for token (with and without its classifier-free guidance), EnCodec decodes
the same audio, and bad folders or settings fail by name."""
from __future__ import annotations

import json

import pytest
import torch
from tiny_speech import K, one_thread, save_tiny_musicgen, with_setting

import speech


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def musicgen_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("musicgen")
    save_tiny_musicgen(folder)
    return folder


@pytest.fixture(scope="module")
def tts(musicgen_folder):
    return speech.load_tts(musicgen_folder)


def own_generate(tts, texts, max_new_tokens, **kwargs):
    """MusicGen's greedy generate: (codes (B, K, T) read from its processed scores, audio (B, S))."""
    inputs = tts.processor(text=texts, padding=True, return_tensors="pt")
    out = tts.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens, return_dict_in_generate=True,
                             output_scores=True, **kwargs)
    steps = torch.stack([s.argmax(-1) for s in out.scores])[:, :len(texts) * K]     # (S, B*K): cond rows
    columns = steps.T.reshape(len(texts), K, -1)
    frames = max_new_tokens + 1 - K
    codes = torch.stack([columns[:, k, k:k + frames] for k in range(K)], 1)          # undo the delay
    return codes, out.sequences[:, 0]


@pytest.mark.parametrize("texts", [["hello there"], ["drum music", "a piano"]])
def test_delay_equals_musicgen_generate(tts, texts):
    ours = tts(texts, decoder="delay", max_new_tokens=14)
    codes, audio = own_generate(tts, texts, 14)
    assert ours.codes.shape == (len(texts), K, 11) and torch.equal(ours.codes, codes)
    assert ours.stats.num_forwards == 11 + K - 1                      # T + K - 1
    assert torch.allclose(torch.as_tensor(ours.audio), audio, atol=1e-6)   # EnCodec decodes the same audio


def test_delay_with_guidance_equals_musicgen_generate(tmp_path):
    save_tiny_musicgen(tmp_path, guidance_scale=30.0)      # large: the tiny model hears its text faintly
    tts = speech.load_tts(tmp_path)
    ours = tts(["drum music", "hello"], decoder="delay", max_new_tokens=12)
    codes, _ = own_generate(tts, ["drum music", "hello"], 12)
    plain = tts(["drum music", "hello"], decoder="delay", max_new_tokens=12, guidance_scale=1.0)
    assert torch.equal(ours.codes, codes) and not torch.equal(plain.codes, codes)


def test_parallel_runs_one_frame_per_forward(tts):
    res = tts("hello there", decoder="parallel", seconds=0.1, seed=0, temperature=0.0)
    assert res.codes.shape == (K, 10) and int(res.codes.max()) < 32
    assert res.stats.num_forwards == 10 and res.sample_rate == 800 and res.audio.shape == (80,)


def test_length_by_seconds_and_sampling(tts):
    res = tts("a piano", seconds=0.05, temperature=1.0, top_k=8, seed=3)
    assert res.codes.shape == (K, 5) and res.seconds == pytest.approx(0.05)


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("decoder, what", [("stack", "stacked heads"), ("local_maskgit", "local"),
                                           ("local_ar", "local"), ("zipar", "unknown decoder")])
def test_decoders_it_cannot_run_are_named(tts, decoder, what):
    with pytest.raises(ValueError, match=what):
        tts("hello", decoder=decoder)


def test_too_long_a_request(tts):
    with pytest.raises(ValueError, match="1 to 60"):
        tts("hello", seconds=5)


def test_folder_without_processor_names_it(tmp_path):
    save_tiny_musicgen(tmp_path, with_processor=False)
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        speech.load_tts(tmp_path)


def test_unsupported_family_lists_the_known_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bark"}))
    with pytest.raises(ValueError, match=r"'bark'.*musicgen \(MusicgenForConditionalGeneration\)"):
        speech.load_tts(tmp_path)


@pytest.mark.parametrize("setting, value", [("repetition_penalty", 1.2), ("num_beams", 2)])
def test_settings_it_cannot_honour_are_refused_by_name(musicgen_folder, tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"{setting}={value!r}"):
        speech.load_tts(with_setting(musicgen_folder, tmp_path, setting, value))
