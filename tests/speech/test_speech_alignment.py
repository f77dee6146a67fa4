"""The TTS alignment: flite's phone timings -> a phone per frame -> per-frame conditioning ids,
and the duration predictor's whole-frame output."""
from __future__ import annotations

import shutil

import pytest
import torch

from speech.alignment import (MAX_COUNT, PHONES, durations, flite_phones, frame_conditioning, frame_phones,
                              utterance_phones)
from speech.duration import DurationPredictor


def test_frame_phones_take_the_phone_under_each_frame_centre():
    ends = [0.06, 0.065, 0.15]         # 50 frames/s: centres 0.01, 0.03, ...
    which = frame_phones(ends, 9)
    assert which.tolist() == [0, 0, 0, 2, 2, 2, 2, 2, 2]        # phone 1 (5 ms) holds no centre; past the end: last
    assert durations(which, 3).tolist() == [3, 0, 6]
    assert frame_phones(ends, 3, start_s=0.04).tolist() == [0, 2, 2]   # audio trimmed 40 ms into flite's timeline


def test_frame_conditioning_ids():
    none = len(PHONES)
    table = frame_conditioning([5, 6, 7], [2, 0, 3], none)
    prev, cur, nxt, since, left = table.T.tolist()
    assert cur == [5, 5, 7, 7, 7]
    assert prev == [none, none, 6, 6, 6] and nxt == [6, 6, none, none, none]    # a 0-frame phone is still a neighbour
    assert since == [0, 1, 0, 1, 2] and left == [1, 0, 2, 1, 0]
    long = frame_conditioning([1], [40], none)
    assert long[:, 3].max() == MAX_COUNT and long[:, 4].max() == MAX_COUNT


def test_duration_predictor_gives_whole_frames_without_drift():
    torch.manual_seed(0)
    pred = DurationPredictor(len(PHONES), hidden=16)
    with torch.no_grad():
        pred.out.bias.fill_(torch.log1p(torch.tensor(2.5)).item())
        pred.out.weight.zero_()
    frames = pred.frames([1, 2, 3, 4])
    assert frames == [2, 3, 2, 3] and sum(frames) == 10      # 2.5 each: the running total is rounded
    ids = torch.tensor([[1, 2, len(PHONES)]])
    assert pred.loss(ids, torch.tensor([[2, 3, 0]])).ndim == 0


@pytest.mark.skipif(not shutil.which("flite"), reason="flite not installed")
def test_flite_phones_are_in_the_phone_set_and_timed():
    phones = flite_phones("Hello, there.")
    names = [p for p, _ in phones]
    assert names[0] == "pau" and names[-1] == "pau" and "hh" in names and set(names) <= set(PHONES)
    ends = [t for _, t in phones]
    assert ends == sorted(ends) and 0.5 < ends[-1] < 3


@pytest.mark.skipif(not shutil.which("flite"), reason="flite not installed")
def test_utterance_phones_follow_the_voice_description():
    """The ASR data's flite utterances: flite's stretch lengthens the timings, a resampling shift
    shortens them; other engines have none."""
    ids, ends = utterance_phones("the quick brown fox", "flite:awb f0=123 stretch=1")
    _, slow = utterance_phones("the quick brown fox", "flite:awb f0=123 stretch=1.2")
    _, fast = utterance_phones("the quick brown fox", "flite:awb f0=123 shift=1.1 stretch=1")
    assert PHONES[ids[0]] == "pau" and PHONES[ids[1]] == "dh" and len(ids) == len(ends)
    assert slow[-1] == pytest.approx(1.2 * ends[-1], rel=0.03)
    assert fast == pytest.approx([t / 1.1 for t in ends])
    assert utterance_phones("the quick brown fox", "espeak:en-us+m1 pitch=40") is None


@pytest.mark.skipif(not shutil.which("flite"), reason="flite not installed")
def test_train_phones_are_cached_per_data_set(monkeypatch, tmp_path):
    from speech import asr_train
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    items = [{"text": "a short test", "voice": "flite:slt f0=200 stretch=1.1"},
             {"text": "a short test", "voice": "espeak:en-us+m1 pitch=40"}]
    first = asr_train.train_phones(items)
    assert first[0] == utterance_phones("a short test", "flite:slt f0=200 stretch=1.1") and first[1] is None
    monkeypatch.setattr(asr_train, "utterance_phones", None)     # a second call must not run flite
    assert asr_train.train_phones(items) == first
    assert len(list((tmp_path / "speech").glob("asr_phones-*.json"))) == 1
