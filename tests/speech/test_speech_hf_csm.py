"""CSM through suite (speech/hf_csm.py) on a tiny random CsmForConditionalGeneration (Llama backbone,
depth decoder, Mimi codec), saved with its processor and reloaded offline: `local_ar` (the depth
decoder as suite's local transformer) equals CSM's own greedy `generate` frame for frame, rows
ending by CSM's end frame at different lengths, Mimi decodes the same audio, and bad folders,
decoders or settings fail by name."""
from __future__ import annotations

import json

import pytest
import torch
from tiny_speech import CSM_Q, CSM_V, one_thread, save_tiny_csm, with_setting

import speech

TEXTS = ["[0]hello there", "[1]hi", "[0]a piano", "[1]how are you", "[0]ok"]


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def csm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("csm")
    save_tiny_csm(folder)
    return folder


@pytest.fixture(scope="module")
def tts(csm_folder):
    return speech.load_tts(csm_folder)


def own_generate(tts, text, max_new_tokens):
    """CSM's greedy generate of one text: (frames (S, Q), audio)."""
    inputs = tts.processor(text=[text], add_special_tokens=True, return_tensors="pt")
    out = tts.model.generate(**inputs, do_sample=False, depth_decoder_do_sample=False, max_new_tokens=max_new_tokens,
                             output_audio=True, return_dict_in_generate=True)
    return out.sequences[0], out.audio[0]


def test_local_ar_equals_csm_generate(tts):
    ours = tts(TEXTS, decoder="local_ar", max_new_tokens=30, temperature=0.0)     # one ragged batch
    lengths = []
    for i, text in enumerate(TEXTS):
        frames, audio = own_generate(tts, text, 30)
        codes = tts.until_silence(frames.T)
        assert torch.equal(ours.codes[i], codes)
        assert torch.allclose(torch.as_tensor(ours.audio[i]), audio.reshape(-1), atol=1e-6)
        lengths.append(frames.shape[0])
    assert len(set(lengths)) > 2 and min(lengths) < 30                         # CSM's end frame inside the test
    assert ours.stats.num_forwards == max(lengths)                             # one backbone forward per frame


def test_one_text_and_seconds(tts):
    res = tts("[0]hello there", seconds=0.1, temperature=0.0)
    frames, _ = own_generate(tts, "[0]hello there", round(0.1 * tts.frame_rate))
    assert torch.equal(res.codes, tts.until_silence(frames.T)) and res.sample_rate == 800


def test_sampling_runs(tts):
    res = tts(["[0]a piano", "[1]hi"], max_new_tokens=8, temperature=1.0, top_k=5, seed=1)
    assert all(c.shape[0] == CSM_Q and (c.numel() == 0 or int(c.max()) < CSM_V) for c in res.codes)


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("decoder, what", [("delay", "codebook 0 only"), ("parallel", "codebook 0 only"),
                                           ("local_maskgit", "causal"), ("stack", "stacked"),
                                           ("zipar", "unknown decoder")])
def test_decoders_it_cannot_run_are_named(tts, decoder, what):
    with pytest.raises(ValueError, match=what):
        tts("[0]hello", decoder=decoder, max_new_tokens=4)


def test_no_length_is_refused(tts):
    with pytest.raises(ValueError, match="seconds= or max_new_tokens="):
        tts("[0]hello", temperature=0.0)


def test_disagreeing_sampling_settings_need_a_choice(csm_folder, tmp_path):
    tts = speech.load_tts(with_setting(csm_folder, tmp_path, "depth_decoder_do_sample", True))
    with pytest.raises(ValueError, match="pass temperature="):
        tts("[0]hello", max_new_tokens=4)
    assert tts("[0]hello", max_new_tokens=4, temperature=0.0).codes.shape[0] == CSM_Q


def test_folder_without_processor_names_it(tmp_path):
    save_tiny_csm(tmp_path, with_processor=False)
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        speech.load_tts(tmp_path)


def test_unsupported_family_lists_the_known_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bark"}))
    with pytest.raises(ValueError, match=r"'bark'.*csm \(CsmForConditionalGeneration\)"):
        speech.load_tts(tmp_path)


@pytest.mark.parametrize("setting, value", [("repetition_penalty", 1.2), ("num_beams", 2)])
def test_settings_it_cannot_honour_are_refused_by_name(csm_folder, tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"{setting}={value!r}"):
        speech.load_tts(with_setting(csm_folder, tmp_path, setting, value))


def test_cli_tts_takes_a_model_folder(csm_folder, tmp_path, capsys):
    from speech.tts import main as tts_cli
    wav = tmp_path / "a.wav"
    assert tts_cli(["[0]hello there", "--model", str(csm_folder), "--seconds", "0.1", "--temperature", "0",
                    "--out", str(wav)]) == 0
    assert wav.stat().st_size > 44 and "5 frames" in capsys.readouterr().out
