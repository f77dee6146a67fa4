"""Issue 40, findings 3 and 4: what the app reads before a handler runs. A recording is read by the
suite's own reader (soundfile: WAV of any sample format, FLAC, OGG; no ffmpeg), and an upload that
cannot be read (a text file sent as an image or as audio, a zero-byte or cut-short WAV) is refused
with a message that names the field and the fix, not Gradio's generic error."""
import numpy as np
import pytest
import soundfile as sf
from gradio import Error
from gradio.data_classes import FileData

RATE = 16000
AUDIO_FIELD = "Audio to transcribe"


class Untouchable:
    """A pipeline no test here reaches (only the tabs' input fields are used)."""
    decoders = ("ar",)

    def __getattr__(self, name):
        raise AttributeError(name)


def component(demo, elem_id):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


@pytest.fixture(scope="module")
def speech_demo():
    import apps.speech
    return apps.speech.build_demo(apps.speech.SpeechPipelines(tts=None, asr=Untouchable()))


@pytest.fixture(scope="module")
def tone():
    t = np.arange(RATE) / RATE
    return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


@pytest.mark.parametrize("name, subtype", [("a.flac", None), ("a.ogg", None), ("float.wav", "FLOAT"),
                                           ("pcm24.wav", "PCM_24"), ("pcm16.wav", "PCM_16")])
def test_a_recording_of_any_common_format_is_read_without_ffmpeg(speech_demo, tone, tmp_path, name, subtype):
    path = tmp_path / name
    sf.write(str(path), tone, RATE, **({"subtype": subtype} if subtype else {}))
    rate, audio = component(speech_demo, "speech-recording").preprocess(FileData(path=str(path)))
    want, _ = sf.read(str(path), dtype="float32")
    assert rate == RATE and audio.dtype == np.float32 and np.array_equal(audio, want)


@pytest.mark.parametrize("case", ["zero bytes", "header cut short", "text file"])
def test_an_unreadable_recording_names_the_field_and_the_fix(speech_demo, tone, tmp_path, case):
    path = tmp_path / "clip.wav"
    if case == "zero bytes":
        path.write_bytes(b"")
    elif case == "header cut short":
        sf.write(str(path), tone, RATE)
        path.write_bytes(path.read_bytes()[:30])
    else:
        path.write_text("this is not a recording")
    with pytest.raises(Error) as e:
        component(speech_demo, "speech-recording").preprocess(FileData(path=str(path)))
    assert e.value.message.startswith(f"{AUDIO_FIELD}: the file is empty, cut short or not audio; ") and \
        "upload a WAV (any sample format), FLAC or OGG" in e.value.message
    assert str(tmp_path) not in e.value.message


@pytest.mark.parametrize("module, elem_id, label", [("apps.text", "text-image", "Image (vision-language models)"),
                                                    ("apps.grounding", "grounding-image", "Image")])
def test_a_text_file_sent_as_an_image_names_the_field_and_the_fix(module, elem_id, label, tmp_path):
    import importlib
    path = tmp_path / "notes.png"
    path.write_text("not a picture")
    field = component(importlib.import_module(module).build_demo(Untouchable()), elem_id)
    assert field.label == label
    with pytest.raises(Error) as e:
        field.preprocess(FileData(path=str(path)))
    assert e.value.message == f"{label}: the file is not a picture this app can read; upload a PNG, JPEG, WEBP, " \
                              "BMP or TIFF picture"
