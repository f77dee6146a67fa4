"""The generated data's recipe: disjoint sentence splits, a held-out voice never drawn for training,
and varied voices from all three engines (Piper, flite, espeak-ng)."""
from __future__ import annotations

import collections
import random

import numpy as np
import pytest

from speech import data


@pytest.fixture(scope="module")
def splits():
    return data.sentence_splits()


def test_sentence_splits_are_disjoint_and_heldout_is_unchanged(splits):
    held, valid, train = set(splits["heldout"]), set(splits["valid"]), set(splits["train"])
    assert len(held) == data.NUM_HELDOUT and len(valid) == data.NUM_VALID and len(train) > 10000
    assert not held & train and not valid & train and not held & valid
    # the held-out sentences are the ones every earlier bench used
    assert splits["heldout"] == data.stdlib_sentences(2550)[2400:]
    assert all(set(s) <= set(data.ALPHABET) for s in splits["train"][:2000])


def test_training_voices_are_varied_and_never_the_heldout_voice():
    draws = [data.draw_voice(random.Random(f"0-train-{i}")) for i in range(3000)]
    engines = collections.Counter(v.split(":")[0] for v, _, _ in draws)
    assert set(engines) == {"piper", "flite", "espeak"} and min(engines.values()) > 300
    assert all(v != data.HELDOUT_VOICE for v, _, _ in draws)
    assert len({v for v, _, _ in draws if v.startswith("espeak")}) >= 20
    scales = [p["length_scale"] for v, _, p in draws if v == "piper:joe"]
    assert min(scales) < 0.85 and max(scales) > 1.25
    # deterministic per (seed, split, index)
    assert data.draw_voice(random.Random("0-train-7")) == draws[7]


def test_extra_voices_are_wider_and_unseen_voice_is_in_no_training_split():
    extra = [data.draw_extra_voice(random.Random(f"0-extra-{i}")) for i in range(2000)]
    unseen = [data.draw_unseen_voice(random.Random(f"0-unseen-{i}")) for i in range(150)]
    train = [data.draw_voice(random.Random(f"0-train-{i}")) for i in range(3000)]
    seen = {v for v, _, _ in extra + train}
    assert data.HELDOUT_VOICE not in seen and not {v for v, _, _ in unseen} & seen
    assert all(not v.startswith(f"espeak:{data.UNSEEN_ACCENT}") for v in seen)
    assert not set(data.UNSEEN_VARIANTS) & set(data.EXTRA_VARIANTS)
    shifts = [p.get("shift", 1.0) for _, _, p in extra]
    assert min(shifts) == 0.8 and max(shifts) == 1.2 and len({v for v, _, _ in extra}) > 200
    # `extra` speaks training sentences beyond the first 6000; `unseen` speaks `valid` sentences
    jobs = data.split_jobs()
    sents = data.sentence_splits()
    assert {t for t, *_ in jobs["extra"]} <= set(sents["train"][6000:])
    assert [t for t, *_ in jobs["unseen"]] == sents["valid"][:data.NUM_HELDOUT]


@pytest.mark.parametrize("voice, params", [("flite:awb", {"stretch": 1.2, "f0": 150.0}),
                                           ("espeak:en-us+m3", {"pitch": 30}),
                                           ("piper:joe", {"length_scale": 1.1, "noise_scale": 0.5, "shift": 1.1})])
def test_synthesize_each_engine_at_16k(voice, params):
    audio = data.synthesize("return the value", voice, **params)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0.4 < len(audio) / data.SAMPLE_RATE < 3.0 and np.abs(audio).max() > 0.05


def test_flite_stretch_slows_speech_down():
    plain = data.synthesize("return the value of the attribute", "flite:awb")
    slow = data.synthesize("return the value of the attribute", "flite:awb", stretch=1.3)
    assert len(slow) > 1.15 * len(plain)


def test_without_piper_only_piper_draws_change(monkeypatch, tmp_path):
    seeds = [f"0-train-{i}" for i in range(500)]
    with_piper = [data.draw_voice(random.Random(s)) for s in seeds]
    without = [data.draw_voice(random.Random(s), piper=False) for s in seeds]
    assert all(a == b for a, b in zip(with_piper, without) if not a[0].startswith("piper"))
    engines = collections.Counter(v.split(":")[0] for v, _, _ in without)
    assert set(engines) == {"flite", "espeak"} and 1.6 < engines["flite"] / engines["espeak"] < 2.5
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    assert data.cache_dir(piper=False) == tmp_path / "speech-no-piper"
    assert data.cache_dir() == tmp_path / "speech"


def test_parallel_generation_equals_serial(monkeypatch, tmp_path):
    arrays = []
    for workers in (1, 2):
        monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path / str(workers)))
        path = data.build(num_train=6, splits=("train",), workers=workers, piper=False) / "train.part0of1.npz"
        with np.load(path) as npz:
            arrays.append({k: npz[k] for k in npz.files})
    assert arrays[0].keys() == arrays[1].keys() and len(arrays[0]["lengths"]) == 6
    assert all(np.array_equal(arrays[0][k], arrays[1][k]) for k in arrays[0])


def test_sentence_splits_from_a_file(monkeypatch, tmp_path):
    path = tmp_path / "sentences.json"
    path.write_text('{"0": {"heldout": ["a b"], "valid": ["c d"], "train": ["e f"]}}')
    monkeypatch.setenv("PARASUITE_SPEECH_SENTENCES", str(path))
    data.sentence_splits.cache_clear()
    try:
        assert data.sentence_splits()["train"] == ["e f"]
    finally:
        data.sentence_splits.cache_clear()


def test_a_larger_tts_split_is_cached_apart_and_extends_the_smaller(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    small, large = data.load_split("tts", num_tts=2), data.load_split("tts", num_tts=3)
    assert sorted(p.name for p in data.cache_dir().glob("tts*.npz")) == ["tts-2.npz", "tts-3.npz"]
    assert data.split_file("tts") == f"tts-{data.NUM_TTS}.npz" and data.split_file("valid", 3) == "valid.npz"
    assert len(large) == 3 and [u["text"] for u in large[:2]] == [u["text"] for u in small]
    assert all(np.array_equal(a["audio"], b["audio"]) for a, b in zip(small, large))
