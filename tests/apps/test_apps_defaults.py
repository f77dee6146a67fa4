"""What a person meets first, without a browser: each modality's default decoder is one constant that
its CLI, its tab and its Python API share (and a lossless one), and every tab that takes text refuses
a prompt of only spaces before touching its model."""
import argparse
import inspect

import gradio as gr
import pytest

import suite


class Untouchable:
    """A pipeline that fails the test when a handler reaches it (bad input must be refused first)."""
    decoders = ("flat", "delay", "parallel")

    def __getattr__(self, name):       # a handler that reaches for its model errs with another message
        raise AttributeError(name)

    def __call__(self, *args, **kwargs):
        pytest.fail("the handler ran its pipeline for an input it must refuse")


def lossless(name: str) -> bool:
    return name == "ar" or suite.decoder_entry(name).guarantee != "lossy"


def test_text_default_is_the_clis_and_the_apis():
    from apps.text import default_decoder
    from text.__main__ import parse_args
    from text.generator import DEFAULT_DECODER
    assert default_decoder() == parse_args(["hi"]).decoder == DEFAULT_DECODER == "auto"


def test_text_max_new_tokens_is_one_default_everywhere():
    """One budget for every text front end: the API's calls, the CLI, the Text tab, a VLM folder's chat."""
    import apps.text
    from suite.vlm import VLM
    from suite.params import DEFAULT_MAX_NEW_TOKENS, RequestParams
    from text.__main__ import parse_args
    from text.generator import TextGenerator
    from text.vlm_chat import VLMChat
    assert RequestParams().max_new_tokens == parse_args(["hi"]).max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    for call in (TextGenerator.generate, TextGenerator.stream, TextGenerator.submit_rows, VLMChat.generate,
                 VLM.generate, VLM.submit, VLM.reference):
        assert inspect.signature(call).parameters["max_new_tokens"].default == DEFAULT_MAX_NEW_TOKENS, call
    demo = apps.text.build_demo(Untouchable())
    slider = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "text-max-new-tokens")
    assert slider.value == DEFAULT_MAX_NEW_TOKENS


def test_image_and_video_defaults_are_the_clis_and_the_apis():
    import apps.image
    import apps.video
    from vision import generate, generate_video, pipeline
    from vision.video import pipeline as video_pipeline
    assert apps.image.DEFAULT_DECODER == generate.build_parser().parse_args(["--out", "x"]).decoder \
        == pipeline.DEFAULT_DECODER
    assert apps.video.DEFAULT_DECODER == generate_video.build_parser().parse_args(["--out", "x"]).decoder \
        == video_pipeline.DEFAULT_DECODER
    assert lossless(pipeline.DEFAULT_DECODER) and lossless(video_pipeline.DEFAULT_DECODER)


def test_grounding_default_is_the_clis_and_lossless():
    import apps.grounding
    from vision.grounding.pipeline import DECODERS, DEFAULT_DECODER, GroundingPipeline
    # python -m vision.ground runs the pipeline's default_decoder when --decoder is not given
    assert apps.grounding.DEFAULT_DECODER == GroundingPipeline.default_decoder == DEFAULT_DECODER
    assert DEFAULT_DECODER in DECODERS and lossless(DEFAULT_DECODER)     # hybrid is lossy: not the default


def test_document_default_is_the_clis_and_the_readers():
    import apps.document
    from document.__main__ import parse
    from document.reader import DEFAULT_DECODER
    assert apps.document.DEFAULT_DECODER == parse(["page.png", "--out", "o"]).decoder == DEFAULT_DECODER
    assert lossless(DEFAULT_DECODER)


def test_speech_defaults_are_the_clis_and_the_apis():
    import apps.speech
    from speech import asr, tts
    args = argparse.Namespace(model=None, decoder=None, seed=0, temperature=None, seconds=None)
    assert apps.speech.DEFAULT_TTS == tts.request_options(args)["decoder"] == tts.DEFAULT_DECODER == "delay"
    api_default = inspect.signature(asr.ASR.__call__).parameters["decoder"].default
    assert apps.speech.DEFAULT_ASR == api_default == asr.DEFAULT_DECODER
    assert asr.DEFAULT_DECODER in apps.speech.asr_decoders()   # ctc_speculative: lossy, but reads better than ar
    assert suite.decoder_entry(tts.DEFAULT_DECODER).guarantee != "lossy"     # parallel is: not the default


def handler(demo, api_name: str):
    return next(f.fn for f in demo.fns.values() if f.api_name == api_name)


def refuses(run, *args, message: str) -> None:
    with pytest.raises(gr.Error, match=message):
        list(run(*args))


def test_every_text_input_refuses_only_spaces():
    import apps.grounding
    import apps.speech
    import apps.text
    text = handler(apps.text.build_demo(Untouchable()), "generate")
    refuses(text, "  \n\t ", False, "ar", "", 16, 0.0, 0, 1.0, 0, False, message="empty prompt")
    ground = handler(apps.grounding.build_demo(Untouchable()), "ground")
    image = apps.grounding.example("aabb")[0]
    refuses(ground, image, "   ", "ar", "axis-aligned", "", False, message="empty query")
    speak = handler(apps.speech.build_demo(apps.speech.SpeechPipelines(Untouchable(), None)), "speak")
    refuses(speak, "   ", "delay", 0.7, 0, False, message="empty text")

