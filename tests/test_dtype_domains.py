"""dtype across the suite: every domain's loader casts the model that decodes (`dtype=`, None: the
process default that `python -m apps --dtype` sets), its inputs follow, and every CLI takes
--dtype. The text side is tests/text/test_text_dtype.py."""
import subprocess
import sys

import numpy as np
import pytest
import torch

import document
import speech
import vision
from document import data as document_data
from suite.models.dtypes import DTYPE_ENV, cast, default_dtype

BF16 = torch.bfloat16


def weight_dtype(module) -> torch.dtype:
    return next(module.parameters()).dtype


def test_the_process_default_and_cast(monkeypatch):
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert default_dtype() == "float32"
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    layer = torch.nn.Linear(2, 2)
    assert cast(layer) == BF16 and layer.weight.dtype == BF16     # None: the process default
    assert cast(layer, "float32") == torch.float32 and layer.weight.dtype == torch.float32
    monkeypatch.setenv(DTYPE_ENV, "half8")
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        cast(layer)


def test_ocr_reads_in_bfloat16_as_in_float32():
    images = [s.image for s in document_data.heldout_set(8)]
    fp32, bf16 = document.load_ocr(), document.load_ocr(dtype="bfloat16")
    assert weight_dtype(bf16.adapter.model) == BF16
    same = sum(a == b for a, b in zip(fp32(images).texts, bf16(images).texts))
    assert same >= 7                                  # 199 of 200 held-out lines identical (BENCHMARKS.md)


def test_image_and_video_priors_in_bfloat16():
    pipe = vision.load_image_pipeline(dtype="bfloat16")
    assert weight_dtype(pipe.prior.model) == BF16 and weight_dtype(pipe.tokenizer.vq) == torch.float32
    assert np.asarray(pipe(["ring"], decoder="ar", seed=0).images[0]).shape[:2] == (64, 64)
    video = vision.load_video_pipeline(dtype="bfloat16")
    assert weight_dtype(video.prior.model) == BF16
    assert len(video(["star"], motion="left", num_frames=2, decoder="diagonal", seed=0).clips[0]) == 2


def test_grounding_in_bfloat16():
    from vision.grounding import data as gdata
    grd = vision.load_grounding_pipeline(dtype="bfloat16")
    assert weight_dtype(grd.model) == BF16
    items = gdata.heldout(4, "aabb")
    images, queries = [s.image for s, _ in items], [q.text for _, q in items]
    fp32 = vision.load_grounding_pipeline()(images, queries, decoder="ar", score=False)
    bf16 = grd(images, queries, decoder="ar", score=False)
    assert sum(len(a.boxes) == len(b.boxes) for a, b in zip(fp32, bf16)) >= 3


def test_speech_in_bfloat16():
    from speech.data import synthesize
    asr = speech.load_asr(dtype="bfloat16")
    assert weight_dtype(asr.model) == BF16
    text = "remove and return an item"
    assert asr(synthesize(text, "flite:rms"), 16000, decoder="ar").text.strip()
    tts = speech.load_tts(dtype="bfloat16")
    assert weight_dtype(tts.frame.model) == BF16 and weight_dtype(tts.codec) == torch.float32
    assert tts("Hello there.", decoder="delay", seed=0).audio.size > 0


@pytest.mark.parametrize("module", ["document", "vision.generate", "vision.ground", "speech.tts", "speech.asr",
                                    "document.bench", "speech.bench", "vision.bench"])
def test_every_cli_refuses_an_unknown_dtype(module):
    out = subprocess.run([sys.executable, "-m", module, *(["image"] if module == "vision.bench" else []),
                          "--dtype", "half8"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--dtype" in out.stderr and "bfloat16" in out.stderr
