"""Dia through suite (speech/hf_dia.py) on a tiny random DiaForConditionalGeneration (byte text
encoder, DAC codec, lags DIA_DELAYS), saved with its processor and codec and reloaded offline:
`delay` equals Dia's own greedy `generate` token for token (rows ending by EOS at different frames,
the max-length cap, its classifier-free guidance and its guidance top-k), DAC decodes
the same audio, `parallel` runs, and bad folders or settings fail by name."""
from __future__ import annotations

import json

import pytest
import torch
from tiny_speech import DIA_CODES, DIA_DELAYS, one_thread, save_tiny_dia, with_setting

import speech

C = len(DIA_DELAYS)


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def dia_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dia")
    save_tiny_dia(folder)
    return folder


@pytest.fixture(scope="module")
def tts(dia_folder):
    return speech.load_tts(dia_folder)


def own_generate(tts, texts, max_new_tokens=None, **kwargs):
    """Dia's greedy generate through its processor: (codes per row (C, T_b), audio per row)."""
    from transformers import DiaFeatureExtractor, DiaProcessor
    processor = DiaProcessor(feature_extractor=DiaFeatureExtractor(sampling_rate=800, hop_length=8),
                             tokenizer=tts.tokenizer, audio_tokenizer=tts.codec)
    specials = {"delay_pattern": list(DIA_DELAYS), "eos_token_id": DIA_CODES, "pad_token_id": DIA_CODES + 1,
                "bos_token_id": DIA_CODES + 2}
    inputs = processor(text=texts, **specials)
    out = tts.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens, **kwargs)   # (B, S, C)
    codes = []
    for row in out:
        frames = int((row[:, 0] == DIA_CODES).nonzero()[0]) - 1          # channel 0's EOS, after the BOS column
        codes.append(torch.stack([row[1 + d:1 + d + frames, k] for k, d in enumerate(DIA_DELAYS)]))
    return codes, processor.batch_decode(out, **specials)


def as_rows(res, n):
    return [res.codes[i] for i in range(n)] if n > 1 else [res.codes]


@pytest.mark.parametrize("texts", [["[S1] hello there"], ["[S1] hello there, how are you", "[S1] hi", "[S2] a b"]])
def test_delay_equals_dia_generate(tts, texts):
    ours = tts(texts if len(texts) > 1 else texts[0], decoder="delay", max_new_tokens=40)
    codes, audio = own_generate(tts, texts, 40)
    rows = as_rows(ours, len(texts))
    assert [r.shape for r in rows] == [c.shape for c in codes] and all(torch.equal(a, b) for a, b in zip(rows, codes))
    waves = ours.audio if len(texts) > 1 else [ours.audio]
    assert all(torch.allclose(torch.as_tensor(w), a.reshape(-1), atol=1e-6) for w, a in zip(waves, audio))
    if len(texts) > 1:
        assert len({r.shape[1] for r in rows}) > 1            # rows end by EOS at different frames
    assert ours.stats.num_forwards == max(r.shape[1] for r in rows) + max(DIA_DELAYS)   # T + max(d)


def test_the_max_length_cap_equals_dia_generate(tts):
    ours = tts(["[S1] hello there, how are you", "[S1] hi"], decoder="delay", max_new_tokens=14)
    codes, _ = own_generate(tts, ["[S1] hello there, how are you", "[S1] hi"], 14)
    assert all(torch.equal(a, b) for a, b in zip(as_rows(ours, 2), codes))
    assert max(c.shape[1] for c in codes) == 14 - max(DIA_DELAYS) - 1


def test_generation_config_max_length(tmp_path):
    save_tiny_dia(tmp_path, max_length=12)
    tts = speech.load_tts(tmp_path)
    ours = tts(["[S1] hello there, how are you", "[S1] hi"], decoder="delay")
    codes, _ = own_generate(tts, ["[S1] hello there, how are you", "[S1] hi"])
    assert all(torch.equal(a, b) for a, b in zip(as_rows(ours, 2), codes))
    assert max(c.shape[1] for c in codes) == 12 - 1              # the cap bit: T_max = max_length - 1


@pytest.mark.parametrize("top_k", [2, 5])   # greedy: guidance acts through its top-k only
def test_delay_with_guidance_equals_dia_generate(tmp_path, top_k):
    save_tiny_dia(tmp_path, guidance_scale=3.0, top_k=top_k)
    tts = speech.load_tts(tmp_path)
    texts = ["[S1] hello there", "[S2] drums"]
    ours = tts(texts, decoder="delay", max_new_tokens=30, temperature=0.0)     # greedy, Dia's guidance top-k kept
    codes, _ = own_generate(tts, texts, 30)
    plain = tts(texts, decoder="delay", max_new_tokens=30, guidance_scale=1.0, temperature=0.0)
    assert all(torch.equal(a, b) for a, b in zip(as_rows(ours, 2), codes))
    assert not all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(as_rows(plain, 2), codes))


def test_sampling_processes_logits_as_dia_generate(tmp_path):
    """Dia's processors in its order (guidance with its top-k, temperature, EOS filter, top-k, top-p):
    our first-step distribution equals softmax of the scores Dia's sampling generate draws from."""
    from suite.sampling import SamplingParams, logits_to_probs
    save_tiny_dia(tmp_path, guidance_scale=3.0, top_k=6)
    tts = speech.load_tts(tmp_path)
    texts, settings = ["[S1] hello there", "[S2] drums"], {"temperature": 1.5, "top_k": 6, "top_p": 0.8}
    bound = tts.bind(texts, None, settings)
    cache = bound.new_cache(len(texts))
    start = torch.full((len(texts), 1, C), DIA_CODES + 2)
    ours = logits_to_probs(bound(start, torch.zeros(len(texts), 1, dtype=torch.long), cache, None)[:, 0],
                           SamplingParams(**settings))                                   # (B, C, V)
    from transformers import DiaFeatureExtractor, DiaProcessor
    processor = DiaProcessor(feature_extractor=DiaFeatureExtractor(sampling_rate=800, hop_length=8),
                             tokenizer=tts.tokenizer, audio_tokenizer=tts.codec)
    inputs = processor(text=texts, delay_pattern=list(DIA_DELAYS), eos_token_id=DIA_CODES, pad_token_id=DIA_CODES + 1,
                       bos_token_id=DIA_CODES + 2)
    out = tts.model.generate(**inputs, do_sample=True, max_new_tokens=2, output_scores=True,
                             return_dict_in_generate=True, **settings)
    theirs = torch.softmax(out.scores[0].float(), -1).view(len(texts), C, -1)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert int((ours[0, 0] > 0).sum()) < 6                  # the filters bite: fewer than top_k candidates


def test_parallel_runs_one_frame_per_forward(tts):
    res = tts("[S1] hello there", decoder="parallel", max_new_tokens=30, temperature=0.0)
    assert res.codes.shape[0] == C and 1 <= res.codes.shape[1] <= 30 - max(DIA_DELAYS) - 1
    assert int(res.codes.max()) < DIA_CODES and res.stats.num_forwards in (res.codes.shape[1], res.codes.shape[1] + 1)
    assert res.audio.shape == (8 * res.codes.shape[1],) and res.sample_rate == 800


def test_sampling_by_seconds(tts):
    res = tts("[S1] a piano", seconds=0.1, temperature=1.2, top_k=8, top_p=0.9, seed=3)
    assert res.codes.shape[0] == C and res.codes.shape[1] <= 10 and int(res.codes.max()) < DIA_CODES


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("decoder, what", [("stack", "stacked heads"), ("local_maskgit", "local"),
                                           ("local_ar", "local"), ("zipar", "unknown decoder")])
def test_decoders_it_cannot_run_are_named(tts, decoder, what):
    with pytest.raises(ValueError, match=what):
        tts("[S1] hello", decoder=decoder, max_new_tokens=20)


def test_temperature_below_one_is_refused(tts):
    with pytest.raises(ValueError, match="temperature >= 1"):
        tts("[S1] hello", temperature=0.7, max_new_tokens=20)


def test_too_long_a_request(tts):
    with pytest.raises(ValueError, match="1 to 58"):
        tts("[S1] hello", seconds=5)


@pytest.mark.parametrize("part, what", [("codec", "DacModel folder"), ("tokenizer", "tokenizer_config.json")])
def test_folder_without_codec_or_tokenizer_names_it(tmp_path, part, what):
    save_tiny_dia(tmp_path, **{f"with_{part}": False})
    with pytest.raises(ValueError, match=what):
        speech.load_tts(tmp_path)


def test_unsupported_family_lists_the_known_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bark"}))
    with pytest.raises(ValueError, match=r"'bark'.*musicgen.*dia \(DiaForConditionalGeneration\)"):
        speech.load_tts(tmp_path)


@pytest.mark.parametrize("setting, value", [("repetition_penalty", 1.2), ("num_beams", 2)])
def test_settings_it_cannot_honour_are_refused_by_name(dia_folder, tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"{setting}={value!r}"):
        speech.load_tts(with_setting(dia_folder, tmp_path, setting, value))


# ---- command lines -----------------------------------------------------------------------------

def test_cli_tts_and_bench_take_a_model_folder(dia_folder, tmp_path, capsys):
    from speech.bench import main as bench
    from speech.tts import main as tts_cli
    wav = tmp_path / "a.wav"
    assert tts_cli(["[S1] hello there", "--model", str(dia_folder), "--seconds", "0.1", "--out", str(wav)]) == 0
    assert wav.stat().st_size > 44
    (tmp_path / "s.txt").write_text("[S1] hello there\n[S2] hi\n")
    assert tts_cli(["--input", str(tmp_path / "s.txt"), "--out", str(tmp_path / "wavs"), "--model", str(dia_folder),
                    "--seconds", "0.1"]) == 0                                   # the batch path: one load, two files
    assert sorted(p.name for p in (tmp_path / "wavs").glob("*.wav")) == ["line_0001.wav", "line_0002.wav"]
    assert bench(["--model", str(dia_folder), "--tts", "1", "--seconds", "0.1"]) == 0
    table = capsys.readouterr().out
    assert "| delay |" in table and "| parallel |" in table and "same_codes_as_delay" in table


def test_cli_unknown_family_lists_the_known_ones(tmp_path, capsys):
    from speech.bench import main as bench
    from speech.tts import main as tts_cli
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bark"}))
    assert tts_cli(["hello", "--model", str(tmp_path), "--out", str(tmp_path / "a.wav")]) == 2
    assert "dia (DiaForConditionalGeneration)" in capsys.readouterr().err and not (tmp_path / "a.wav").exists()
    assert bench(["--model", str(tmp_path)]) == 2
    assert "whisper (WhisperForConditionalGeneration)" in capsys.readouterr().err
