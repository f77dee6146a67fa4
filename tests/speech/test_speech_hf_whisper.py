"""Whisper through suite (speech/hf_asr.py) on a tiny random WhisperForConditionalGeneration, saved
with its processor and reloaded offline: `ar` equals Whisper's own `generate` token for token
(forced prompt, language detection, suppress_tokens, begin_suppress_tokens), every exact decoder
equals `ar`, and bad folders or settings fail by name."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_speech import one_thread, save_tiny_whisper, with_setting

import speech
from speech.hf_asr import WhisperAdapter, forced_prompt

@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def whisper_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper")
    save_tiny_whisper(folder)
    return folder


@pytest.fixture(scope="module")
def asr(whisper_folder):
    return speech.load_asr(whisper_folder)


def audio_clips(n: int, seconds: float = 0.7):
    rng = np.random.default_rng(0)
    return [(0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32) for _ in range(n)]


def own_generate(asr, features, max_new_tokens, **kwargs) -> list[list[int]]:
    """Whisper's own greedy generate: each row's prompt + new tokens, cut after EOS."""
    out = asr.adapter.model.generate(features, max_new_tokens=max_new_tokens, return_dict_in_generate=True,
                                     **kwargs).sequences.tolist()
    eos = asr.adapter.config.eos_token_ids
    rows = []
    for row in out:
        ends = [i for i, t in enumerate(row) if t in eos and i > 0]
        rows.append(row[:ends[0] + 1] if ends else row)
    return rows


@pytest.mark.parametrize("kwargs", [{}, {"language": "fr"}, {"language": "english", "task": "translate"}])
def test_ar_equals_whisper_generate(asr, kwargs):
    features = asr.window_features(np.concatenate(audio_clips(3, seconds=1.0)))   # 3 windows, one batch
    prompts, result = asr.decode_windows(features, "ar", max_new_tokens=30, **kwargs)
    ours = [p + n for p, n in zip(prompts, result.new_tokens)]
    assert ours == own_generate(asr, features, 30, **kwargs)
    assert all(len(p) == (4 if kwargs else 3) for p in prompts)    # start, language, [task,] notimestamps
    gen = asr.adapter.model.generation_config
    for row in result.new_tokens:
        assert not set(row) & set(gen.suppress_tokens) and row[0] not in gen.begin_suppress_tokens


@pytest.mark.parametrize("decoder, options", [("speculative", {"draft": "self:1"}), ("speculative", {}),
                                              ("ngram", {}), ("lookahead", {})])
def test_exact_decoders_equal_ar(asr, decoder, options):
    features = asr.window_features(np.concatenate(audio_clips(3, seconds=1.0)))
    prompts, ar = asr.decode_windows(features, "ar", max_new_tokens=36, language="en")
    _, res = asr.decode_windows(features, decoder, max_new_tokens=36, language="en", **options)
    assert res.new_tokens == ar.new_tokens
    assert any(r[-1] in asr.adapter.config.eos_token_ids for r in ar.new_tokens)   # EOS inside the test
    if decoder != "speculative":
        assert res.stats.num_forwards <= ar.stats.num_forwards


def test_speculative_with_a_smaller_whisper(whisper_folder, tmp_path):
    save_tiny_whisper(tmp_path, seed=1, decoder_layers=1, with_processor=False)
    asr = speech.load_asr(whisper_folder, draft_model=tmp_path)
    features = asr.window_features(audio_clips(1, seconds=0.8)[0])
    _, ar = asr.decode_windows(features, "ar", max_new_tokens=30)
    _, spec = asr.decode_windows(features, "speculative", max_new_tokens=30)
    assert spec.new_tokens == ar.new_tokens and spec.stats.num_draft_forwards > 0


def test_adapter_logits_equal_the_full_model(asr):
    """Cached, position-ordered decoding through the adapter gives the model's own logits, processed."""
    features = asr.window_features(audio_clips(1)[0])
    prompt = [30, 31, 34, 35, 7, 8, 9]
    bound = asr.adapter.for_features(features, [4])
    cache = bound.new_cache(1)
    pos = torch.arange(len(prompt))[None]
    first = bound(torch.tensor([prompt[:5]]), pos[:, :5], cache, None)
    cache.append(pos[:, :5], torch.ones(1, 5, dtype=torch.bool))
    rest = bound(torch.tensor([prompt[5:]]), pos[:, 5:], cache, None)
    with torch.no_grad():
        full = asr.adapter.model(input_features=features, decoder_input_ids=torch.tensor([prompt])).logits
    expect = bound.processed(full, pos)
    got = torch.cat([first, rest], 1)
    finite = torch.isfinite(expect)
    assert torch.equal(finite, torch.isfinite(got)) and torch.allclose(got[finite], expect[finite], atol=1e-5)
    assert not torch.isfinite(got[0, 3, 29]) and torch.isfinite(got[0, 4, 29])   # begin-suppress at the first slot only


def test_long_audio_goes_in_windows(asr):
    clips = audio_clips(1, seconds=2.5)[0]
    res = asr(clips, 16000, decoder="ngram", language="en", max_new_tokens=20)
    features = asr.window_features(clips)
    assert features.shape[0] == 3 and asr.window_seconds == 1.0
    texts = asr.processor.tokenizer.batch_decode([r[4:] for r in own_generate(asr, features, 20, language="en")],
                                                 skip_special_tokens=True)
    assert res.text == " ".join(t.strip() for t in texts if t.strip())
    assert res.audio_seconds == pytest.approx(2.5)


def test_forced_prompt_follows_legacy_forced_decoder_ids(asr):
    gen = asr.adapter.model.generation_config
    legacy = type(gen).from_dict({**gen.to_dict(), "forced_decoder_ids": [[1, 32], [2, 33]]})
    assert forced_prompt(legacy, asr.adapter.model.config, None, None) == [30, 32, 33, 35]
    assert forced_prompt(legacy, asr.adapter.model.config, "en", None) == [30, 31, 34, 35]


def test_cli_takes_model_folder(whisper_folder, tmp_path, capsys):
    import soundfile as sf

    from speech.asr import main
    wav = tmp_path / "clip.wav"
    sf.write(wav, audio_clips(1)[0], 16000)
    assert main([str(wav), "--model", str(whisper_folder), "--decoder", "lookahead", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["num_new_tokens"] > 0


def test_bench_rows_of_a_whisper_folder(asr):          # what `python -m speech.bench --model DIR` prints
    from speech.bench import bench_asr
    from speech.hf_asr import DECODERS
    items = [{"audio": a, "text": "hello"} for a in audio_clips(2)]
    rows = bench_asr(asr, items, decoders=DECODERS)
    assert [r["decoder"] for r in rows] == list(DECODERS)
    assert all(r["exact_match_with_ar"] == 1.0 and r["decoder_forwards"] > 0 for r in rows)


# ---- bad input ---------------------------------------------------------------------------------

def test_folder_without_processor_names_it(tmp_path):
    save_tiny_whisper(tmp_path, with_processor=False)
    with pytest.raises(ValueError, match="has no tokenizer_config.json and no preprocessor_config.json"):
        speech.load_asr(tmp_path)


def test_unsupported_family_lists_the_known_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "wav2vec2"}))
    with pytest.raises(ValueError, match=r"'wav2vec2'.*whisper \(WhisperForConditionalGeneration\)"):
        speech.load_asr(tmp_path)


@pytest.mark.parametrize("setting, value", [("num_beams", 4), ("return_timestamps", True),
                                            ("repetition_penalty", 1.3), ("no_repeat_ngram_size", 3)])
def test_settings_it_cannot_honour_are_refused_by_name(whisper_folder, tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"{setting}={value!r}"):
        speech.load_asr(with_setting(whisper_folder, tmp_path, setting, value))


def test_bad_requests(asr):
    clip = audio_clips(1)[0]
    with pytest.raises(ValueError, match="choose one of: ar, speculative, ngram, lookahead"):
        asr(clip, 16000, decoder="ctc")
    with pytest.raises(ValueError, match="not one of this checkpoint's languages"):
        asr(clip, 16000, language="de")
    with pytest.raises(ValueError, match="not one of this checkpoint's tasks"):
        asr(clip, 16000, task="summarise")
    with pytest.raises(ValueError, match=r"1 <= N < 3"):
        asr(clip, 16000, decoder="speculative", draft="self:3")
    with pytest.raises(ValueError, match="bind the adapter"):
        WhisperAdapter(asr.adapter.model).new_cache(1)
