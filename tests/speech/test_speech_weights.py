"""The shipped weights load offline and give the documented quality (README of speech/weights)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

import speech
from speech.tts import FRAME_OUTPUT
from speech.data import synthesize
from speech.metrics import cer

WEIGHTS = Path(speech.__file__).parent / "weights"
SENTENCES = ["remove and return an item from the queue",          # stdlib docstrings, not in training
             "return true if the object is a class"]


@pytest.fixture(scope="module")
def asr():
    torch.set_num_threads(1)
    return speech.load_asr()


@pytest.fixture(scope="module")
def tts():
    return speech.load_tts()


@pytest.mark.parametrize("name", ["codec", "asr", "tts", "tts_flat", "tts_delay", "tts_stack"])
def test_weights_are_small_safetensors_with_config(name):
    folder = WEIGHTS / name
    assert (folder / "config.json").exists() and json.loads((folder / "config.json").read_text())["model_type"]
    assert (folder / "model.safetensors").stat().st_size <= 20 * 2 ** 20


def test_delay_and_stack_run_on_their_own_checkpoints(tts):
    """tts_delay (the DELAY layout alone) and tts_stack (stacked heads + a two-frame local
    transformer) are shipped: `delay`, `stack` and `stack_local` decode on them, the rest on the
    frame model."""
    assert tts.delay.model is not tts.frame.model and tts.stack.model is not tts.frame.model
    assert tts.stack_local.model is tts.stack.model and tts.stack.model.config.local_frames == 2
    assert {"delay", "stack", "stack_local"} <= set(tts.decoders)


def test_asr_reads_an_unseen_voice(asr):
    """flite rms never appears in training; documented held-out CER (ctc) 0.33 (metrics.json, bench)."""
    refs = SENTENCES
    hyps = [asr(synthesize(t, "flite:rms"), 16000, decoder="ctc").text for t in refs]
    assert cer(refs, hyps) <= 0.45, hyps


def test_asr_ships_its_char_lm_and_gate_and_beam_search_reads_the_unseen_voice(asr):
    """ctc_beam: prefix beam search + the character LM of the training text (never the held-out
    sentences); its fusion weights and ctc_speculative's gate were tuned on the valid split."""
    assert asr.lm is not None and asr.lm.order >= 3 and asr.lm.alpha > 0
    assert (WEIGHTS / "asr" / "decoding.json").exists() and asr.speculative["realign"] in (True, False)
    refs = SENTENCES
    beam = [asr(synthesize(t, "flite:rms"), 16000, decoder="ctc_beam") for t in refs]
    assert all(r.stats.num_forwards == 0 for r in beam)
    assert cer(refs, [r.text for r in beam]) <= 0.25, [r.text for r in beam]     # bench: 0.151 held-out


def test_asr_decoders_agree_and_speculative_is_cheaper(asr):
    audio = synthesize(SENTENCES[0], "flite:kal16")
    ar = asr(audio, 16000, decoder="ar")
    spec = asr(audio, 16000, decoder="ctc_speculative", max_entropy=0.0, min_ratio=1.0)   # lossless
    assert spec.text == ar.text
    assert spec.stats.num_forwards < ar.stats.num_forwards


def test_concurrent_utterances_share_forwards_and_read_as_alone(asr):
    """Utterances of different lengths at once: their rows share the decoder's forwards (the audio
    prefix travels in the cache, zero-padded) and each reads what it reads alone."""
    from concurrent.futures import ThreadPoolExecutor
    clips = [synthesize(t, "flite:kal16") for t in SENTENCES + ["open the file"]]
    alone = [asr(a, 16000, decoder="ar") for a in clips]
    before = asr.scheduler.forwards_run
    with ThreadPoolExecutor(len(clips)) as pool:
        together = list(pool.map(lambda a: asr(a, 16000, decoder="ar"), clips))
    assert [r.text for r in together] == [r.text for r in alone]
    assert sum(r.stats.num_forwards for r in together) > asr.scheduler.forwards_run - before


# three of the six frame decoders, to keep the suite short (parallel, local_ar and stack pass as well)
@pytest.mark.parametrize("decoder", ["delay", "local_maskgit", "stack_local"])
def test_concurrent_sentences_share_forwards_and_speak_as_alone(tts, decoder):
    """Sentences of different lengths at once: their rows share the TTS model's forwards (each row's
    BOS position and frame conditioning travel in its cache, zero-padded) and each gets the codes it
    gets alone: sampled with the default seed, each row drawing from its own stream."""
    from concurrent.futures import ThreadPoolExecutor
    texts = ["Hello there.", "Remove and return an item from the queue.", "Yes."]
    speak = lambda t: tts(t, decoder=decoder, seed=0, max_seconds=3.0)     # noqa: E731
    alone = [speak(t) for t in texts]
    scheduler = tts.scheduler(tts.delay if decoder == "delay" else tts.stack_local if decoder == "stack_local" else
                              tts.stack if decoder == "stack" else tts.heads[FRAME_OUTPUT[decoder]])
    before = scheduler.forwards_run
    with ThreadPoolExecutor(len(texts)) as pool:
        together = list(pool.map(speak, texts))
    assert [r.codes.tolist() for r in together] == [r.codes.tolist() for r in alone]
    assert sum(r.stats.num_forwards for r in together) > scheduler.forwards_run - before


def test_asr_resamples_other_rates(asr):
    audio = synthesize(SENTENCES[1], "flite:slt")
    import torchaudio
    a44 = torchaudio.functional.resample(torch.from_numpy(audio), 16000, 44100).numpy()
    assert cer([SENTENCES[1]], [asr(a44, 44100, decoder="ctc").text]) <= 0.6


def test_codec_round_trip_stays_intelligible(tts, asr):
    audio = synthesize(SENTENCES[0], "flite:slt")
    codes = tts.codec.encode(torch.from_numpy(audio)[None])
    assert codes.shape[1] == 4 and codes.max() < 256
    rt = tts.codec.decode(codes)[0].numpy()
    assert cer([SENTENCES[0]], [asr(rt, 16000, decoder="ctc").text]) <= 0.6


@pytest.mark.parametrize("decoder", ["flat", "delay", "parallel", "local_ar", "local_maskgit", "stack", "stack_local"])
def test_tts_speaks_intelligibly(tts, asr, decoder):
    res = tts("Remove and return an item from the queue.", decoder=decoder, seed=0)
    q, t = res.codes.shape
    assert q == 4 and res.sample_rate == 16000 and 0.8 < res.seconds < 8
    halved = {"stack": t // 2 + 1, "stack_local": t // 2 + 1}
    assert res.stats.num_forwards == {"flat": t * q + 1, "delay": t + q - 1, **halved}.get(decoder, t + 1)
    # bench: CER 0.21-0.31 over 8 sentences (codec round trip 0.19); this sentence 0.08-0.25 at seed 0
    assert cer([SENTENCES[0]], [asr(res.audio, 16000, decoder="ctc").text]) <= 0.45


def test_cli_tts_and_asr_batch(tmp_path):
    out = tmp_path / "a.wav"
    run = subprocess.run([sys.executable, "-m", "speech.tts", "Return true if the object is a class.",
                          "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    audio, sr = sf.read(out)
    assert sr == 16000 and len(audio) > 8000
    (tmp_path / "broken.wav").write_text("not audio")
    sf.write(tmp_path / "silent.wav", np.zeros(16000, np.float32), 16000)
    run = subprocess.run([sys.executable, "-m", "speech.asr", str(tmp_path), "--decoder", "ctc"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr                          # 1: some files of the batch failed
    assert "a.wav\t" in run.stdout and "not a readable audio file" in run.stderr
    assert "error: " + str(tmp_path / "silent.wav") + ": audio is silent" in run.stderr   # errors name the file


def test_cli_errors_exit_2_and_write_nothing(tmp_path):
    out = tmp_path / "x.wav"
    run = subprocess.run([sys.executable, "-m", "speech.tts", "", "--out", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error: ") and not out.exists()
    run = subprocess.run([sys.executable, "-m", "speech.asr", str(tmp_path / "missing")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "error: " in run.stderr
