"""Bad input gets clear errors; layouts and helpers behave (no trained weights needed)."""
from __future__ import annotations

import numpy as np
import pytest

from speech.asr import check_audio, read_audio
from speech.data import normalize_text
from speech.metrics import cer
from speech.tts import check_text


@pytest.mark.parametrize("text, match", [("", "empty"), ("   ", "empty"), ("?!", "empty"),
                                         ("caf\u00e9 au lait", "unsupported"), ("a < b", "unsupported"),
                                         ("word " * 60, "at most"), (42, "string")])
def test_bad_text(text, match):
    with pytest.raises(ValueError, match=match):
        check_text(text)


def test_good_text_is_normalised():
    assert check_text("  Hello,\n  there!  ") == "Hello, there!"


def _tone(seconds=1.0, sr=16000, amp=0.3):
    t = np.arange(int(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


@pytest.mark.parametrize("audio, sr, match", [
    (np.zeros(16000, np.float32), 16000, "silent"),
    (np.ones(16000, np.float32), 16000, "clipped"),
    (np.zeros(0, np.float32), 16000, "empty"),
    (np.full(16000, np.nan, np.float32), 16000, "NaN"),
    (np.array(["a", "b"]), 16000, "numeric"),
    (np.zeros((2, 2, 2), np.float32), 16000, "1-D"),
    (_tone(), 0, "sample_rate"),
    (_tone(0.01), 16000, "at least"),
    (_tone(40), 16000, "split"),
])
def test_bad_audio(audio, sr, match):
    with pytest.raises(ValueError, match=match):
        check_audio(audio, sr)


def test_audio_is_resampled_mixed_and_scaled():
    out = check_audio(np.stack([_tone(1.0, 44100)] * 2), 44100)        # stereo, 44.1 kHz
    assert out.dtype == np.float32 and abs(len(out) - 16000) <= 1
    pcm = (_tone() * 32767).astype(np.int16)
    assert np.allclose(check_audio(pcm, 16000), _tone(), atol=1e-3)


def test_non_audio_file(tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("this is not audio")
    with pytest.raises(ValueError, match="not a readable audio file"):
        read_audio(bad)
    with pytest.raises(ValueError, match="not a file"):
        read_audio(tmp_path / "missing.wav")


def test_cer_and_normalisation():
    assert cer(["abcd"], ["abcd"]) == 0 and cer(["abcd"], ["abxd"]) == 0.25 and cer(["ab"], [""]) == 1.0
    assert normalize_text("Hello, World's  A&B-C.") == "hello world's a and b c"


def test_feature_normalisation_ignores_batch_padding():
    """A padded utterance is normalised exactly as the same utterance alone (batched held-out CER
    used to read padding as signal)."""
    import torch
    from speech.asr_model import normalise_features
    torch.manual_seed(0)
    a, b = torch.randn(1, 80, 50) * 3 + 1, torch.randn(1, 80, 20) - 2
    batch = torch.cat([a, torch.nn.functional.pad(b, (0, 30), value=-11.5)])
    out = normalise_features(batch, torch.tensor([50, 20]))
    assert torch.allclose(out[1:, :, :20], normalise_features(b), atol=1e-5)
    assert torch.allclose(out[:1], normalise_features(a), atol=1e-5)
    assert not torch.allclose(normalise_features(batch)[1:, :, :20], normalise_features(b), atol=1e-2)


def test_speed_perturbation_scales_duration():
    from speech.asr_train import speed_perturb
    audio = _tone(1.0)
    assert abs(len(speed_perturb(audio, 1.1)) - 16000 / 1.1) < 2 and len(speed_perturb(audio, 0.9)) > 17700
    assert speed_perturb(audio, 1.0) is audio


def test_conformer_conv_module_ignores_batch_padding():
    import torch
    from speech.asr_model import ConvModule
    torch.manual_seed(0)
    conv = ConvModule(16, 15).eval()
    x = torch.randn(1, 12, 16)
    padded = torch.cat([x, torch.randn(1, 8, 16) * 100], 1)
    pad = torch.arange(20)[None] >= 12
    assert torch.allclose(conv(padded, pad)[:, :12], conv(x, torch.zeros(1, 12, dtype=torch.bool)), atol=1e-5)


def test_asr_training_on_cuda_without_a_gpu_is_a_clear_error():
    import torch
    from speech.asr_train import train_asr
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        train_asr(0.01, device="cuda")


def test_frame_phone_labels_for_the_auxiliary_loss():
    """Encoder frames (stride 3: 30 ms apart from 0 s) get the phone under their centre; past a
    row's length or last phone, and on rows without timings: -100."""
    from speech.asr_train import frame_labels
    ends = [0.05, 0.10, 0.16]                  # centres 0, .03, .06, .09, .12, .15, .18
    labels = frame_labels([([7, 8, 9], ends), None, ([7, 8, 9], ends)], [10, 4, 3], stride=3)
    assert labels.tolist() == [[7, 7, 8, 8, 9, 9, -100, -100, -100, -100], [-100] * 10,
                               [7, 7, 8] + [-100] * 7]


def test_phone_head_reads_the_middle_layer_and_round_trips(tmp_path):
    import torch
    from speech.asr_model import ASRConfig, Recogniser
    torch.manual_seed(0)
    model = Recogniser(ASRConfig(d_model=32, enc_layers=2, heads=2, dec_layers=1, dec_hidden=32, conv_kernel=5,
                                 phone_classes=45)).eval()
    mel, lengths = torch.randn(2, 80, 30), torch.tensor([30, 21])
    enc, log_probs, enc_len = model.encode(mel, lengths)
    *same, phone_logits = model.encode(mel, lengths, phones=True)
    assert torch.equal(same[1], log_probs) and phone_logits.shape == (2, 10, 45)
    model.save(tmp_path)
    assert torch.equal(Recogniser.load(tmp_path).encode(mel, lengths, phones=True)[3], phone_logits)
    with torch.no_grad():                       # the head reads the first layer, not the last
        model.encoder.convs[1].pw_out.weight.add_(1.0)
    assert torch.equal(model.encode(mel, lengths, phones=True)[3], phone_logits)
