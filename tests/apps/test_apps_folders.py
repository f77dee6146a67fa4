"""Each tab's "Model folder", without a browser: a tiny random model of a real family saved to a folder
(as a user's would be) gives through the tab's handler what it gives through the Python API, a
vision-language folder answers about the Text tab's image, an image family draws the Image tab's
prompt, each folder loads once, and a bad folder (or a decoder its family cannot run) is a readable
error naming the fix, with the outputs cleared."""
import re
import threading

import gradio as gr
import numpy as np
import pytest

import tiny_vlm
from tiny_speech import one_thread, save_tiny_musicgen, save_tiny_whisper

TEXT_BLANK, GROUND_BLANK, READ_BLANK = ("",) * 5, (None, "", ""), (None, "", "", "", "")
IMAGE_BLANK = (None, None, None, None, "")
SPEAK_BLANK, HEAR_BLANK = (None, None, None, None, "", ""), ("", "", "")


class Untouchable:
    """An embedded pipeline the handlers must not reach (every request here names a folder)."""
    decoders = ("flat", "delay", "parallel")

    def __getattr__(self, name):
        raise AttributeError(name)

    def __call__(self, *args, **kwargs):
        pytest.fail("the handler ran the embedded pipeline for a model folder")


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module", autouse=True)
def models_root(tmp_path_factory):
    """The server's models root: the test run's temporary folder, where every folder here is made
    (tests/apps/test_apps_models_root.py checks what lies outside it)."""
    import os

    from apps.folders import MODELS_DIR_ENV
    before = os.environ.get(MODELS_DIR_ENV)
    os.environ[MODELS_DIR_ENV] = str(tmp_path_factory.getbasetemp())
    yield
    if before is None:
        os.environ.pop(MODELS_DIR_ENV, None)
    else:
        os.environ[MODELS_DIR_ENV] = before


def handler(demo, api_name: str):
    return next(f.fn for f in demo.fns.values() if f.api_name == api_name)


def last(views):
    *_, final = views
    return final


def refused(views, blank: tuple, message: str) -> str:
    """The error's message, after checking that the only views before it are blank ones."""
    with pytest.raises(gr.Error) as e:
        for view in views:
            assert view == blank                   # no stale result beside the error
    assert re.search(message, e.value.message), e.value.message
    assert "Traceback" not in e.value.message and "\n" not in e.value.message
    return e.value.message


@pytest.fixture(scope="module")
def paligemma_dir(tmp_path_factory, embedded_folder):
    return tiny_vlm.paligemma(embedded_folder, tmp_path_factory.mktemp("paligemma"))


@pytest.fixture(scope="module")
def generate():
    import apps.text
    return handler(apps.text.build_demo(Untouchable()), "generate")


def text_args(prompt, decoder, folder, image=None, compare=True, chat=False):
    """The Text tab's inputs, in the API's order (8 new tokens, greedy)."""
    return (prompt, chat, decoder, "", 8, 0.0, 0, 1.0, 0, compare, str(folder), image)


# -- Text ---------------------------------------------------------------------------------------------

def test_text_tab_decodes_a_causal_lm_folder_like_the_library(generate, tiny_dir):
    import text
    want = text.load(tiny_dir).generate("def fib(n):", decoder="ngram", max_new_tokens=8)
    out, chunks, ar_out, _, stats = last(generate(*text_args("def fib(n):", "ngram", tiny_dir)))
    assert out == ar_out == want.text
    assert "data-same='true'" in stats and "class='ps-chunk'" in chunks


def test_text_tab_answers_about_an_image_with_a_vlm_folder(generate, paligemma_dir):
    import text
    image = tiny_vlm.images(1)[0]
    want = text.load(paligemma_dir).generate("caption en", image=image, decoder="ngram", max_new_tokens=8)
    views = list(generate(*text_args("caption en", "ngram", paligemma_dir, image)))
    out, chunks, ar_out, _, stats = views[-1]
    assert out == ar_out == want.text
    assert "data-same='true'" in stats and f"data-stat='tokens' style='padding:4px 10px'>{want.stats.num_new_tokens}<" in stats
    assert chunks.count("class='ps-chunk'") == want.stats.num_forwards     # one span per forward


@pytest.mark.parametrize("case, message", [
    ("missing", r"^no model folder '.*nowhere' in this server's models folder \(folders there: "),
    ("image to an LM", r"^this model reads no images; give a vision-language model folder \(florence2, .*\), or "
                       r"remove the image$"),
    ("no image to a VLM", r"^paligemma is a vision-language model: add an image to ask about$"),
    ("decoder it cannot run", r"^decoder 'auto' does not run on paligemma; use one of: ar, jacobi"),
])
def test_text_tab_bad_folder_or_image_is_a_readable_error(generate, tiny_dir, paligemma_dir, tmp_path, case,
                                                          message):
    image = tiny_vlm.images(1)[0]
    args = {"missing": ("hi", "ar", tmp_path / "nowhere"), "image to an LM": ("hi", "ar", tiny_dir, image),
            "no image to a VLM": ("hi", "ar", paligemma_dir),
            "decoder it cannot run": ("hi", "auto", paligemma_dir, image)}[case]
    refused(generate(*text_args(*args)), TEXT_BLANK, message)


# -- Image --------------------------------------------------------------------------------------------

class UntouchablePrior(Untouchable):
    """The embedded prior, as far as building the Image tab reads it (its classes and grid)."""
    classes, grid = ("circle",), (4, 4)


EMU3_CODES = [f"<|visual token {i:06d}|>" for i in range(16)]
EMU3_SPECIALS = {"image_token": "<image>", "boi_token": "<|image start|>", "eoi_token": "<|image end|>",
                 "image_wrapper_token": "<|image token|>", "eof_token": "<|extra_201|>"}


@pytest.fixture(scope="module")
def emu3_dir(tmp_path_factory, embedded_folder):
    """A random 2-layer Emu3 (16 codes, a 2x VQ decoder) with its processor: SmolLM2's tokenizer with
    Emu3's code, end-of-line and image tokens added (as in tests/vision/test_vision_hf_image.py)."""
    import torch
    import transformers as tf
    folder = tmp_path_factory.mktemp("emu3")
    tok = tf.AutoTokenizer.from_pretrained(str(embedded_folder), local_files_only=True)
    tok.add_special_tokens(tiny_vlm.SPECIALS)
    tok.add_tokens(EMU3_CODES + ["<|extra_200|>"])
    tok.add_special_tokens({"additional_special_tokens": list(EMU3_SPECIALS.values())})
    tok.save_pretrained(str(folder))             # v5 names Emu3's tokens only through extra_special_tokens
    tok = tf.AutoTokenizer.from_pretrained(str(folder), extra_special_tokens=EMU3_SPECIALS)
    vocab = {t: tok.convert_tokens_to_ids(t) for t in EMU3_CODES + ["<|extra_200|>", "<image>"]}
    text = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, **tiny_vlm.HIDDEN)
    vq = dict(codebook_size=16, embed_dim=4, latent_channels=4, base_channels=32, channel_multiplier=[1, 1],
              num_res_blocks=1, attn_resolutions=[], temporal_downsample_factor=2, hidden_size=32)
    torch.manual_seed(0)
    model = tf.Emu3ForConditionalGeneration(tf.Emu3Config(vq_config=vq, text_config=text, vocabulary_map=vocab))
    with torch.no_grad():                        # sharpen so greedy paths are not decided by float noise
        model.lm_head.weight.mul_(8.0)
    model.eval().save_pretrained(str(folder))
    tf.Emu3Processor(image_processor=tf.Emu3ImageProcessor(), tokenizer=tok).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def generate_image():
    import apps.image
    return handler(apps.image.build_demo(UntouchablePrior()), "generate_image")


def image_args(decoder, folder, prompt="a red apple", grid=(3, 4), options="", compare=True, temperature=0.0):
    """The Image tab's inputs, in the API's order (the class is unused with a folder; CFG 2, seed 0)."""
    return ("circle", decoder, options, 2.0, temperature, 0, compare, str(folder), prompt, *grid)


@pytest.mark.parametrize("decoder, options, typed, temperature", [("zipar", "window=5", {"window": 5}, 0.0),
                                                                    ("sjd", "init=left", {"init": "left"}, 1.0)])
def test_image_tab_draws_with_an_emu3_folder_like_the_library(generate_image, emu3_dir, decoder, options, typed,
                                                              temperature):
    """Greedy zipar with a full-row window (an Emu3 row ends with its end-of-line code: 4 + 1) and
    sampled sjd: the tab's image and forwards are the API's on the same folder, and ar's beside them."""
    import torch
    from apps.image import upscale
    from vision.hf_image import load_hf_image_model
    hf = load_hf_image_model(str(emu3_dir))
    ids, args = hf.prompt_ids("a red apple"), dict(grid=(3, 4), guidance_scale=2.0, temperature=temperature, seed=0)
    want, ar = hf.generate(ids, decoder=decoder, **args, **typed), hf.generate(ids, decoder="ar", **args)
    views = list(generate_image(*image_args(decoder, emu3_dir, options=options, temperature=temperature)))
    picture, steps, ar_picture, ar_steps, stats = views[-1]
    assert views[0][:4] == (None,) * 4 and "data-state='running'" in views[0][4]      # shown while it runs
    assert np.array_equal(np.asarray(picture), np.asarray(upscale(want.images[0])))
    assert np.array_equal(np.asarray(ar_picture), np.asarray(upscale(ar.images[0])))
    assert steps is None and ar_steps is None                                         # the call is whole
    assert f"<tr data-decoder='{decoder}' data-state='done'>" in stats and "data-guarantee=" in stats
    assert f"data-stat='forwards' style='padding:4px 10px'>{want.stats.num_forwards}<" in stats
    assert f"data-same='{str(torch.equal(want.tokens, ar.tokens)).lower()}'" in stats
    assert decoder != "zipar" or "data-same='true'" in stats      # a full-row window is exact when greedy


@pytest.mark.parametrize("case, message", [
    ("missing", r"^no model folder '.*nowhere' in this server's models folder"),
    ("another family", r"holds a 'llama' model; .*loads emu3, chameleon, janus checkpoints"),
    ("decoder it cannot run", r"^decoder 'lpd' does not run on emu3 .*; use one of: ar, sjd, mc_sjd, zipar, zipar_sjd$"),
    ("no prompt", r"^empty prompt: describe the image"),
    ("no grid", r"^emu3 draws any size: set the grid's height and width in tokens"),
])
def test_image_tab_bad_folder_is_a_readable_error(generate_image, emu3_dir, tmp_path, case, message):
    from tinymodels import tiny_model
    folder = {"missing": tmp_path / "nowhere", "another family": tmp_path / "llama"}.get(case, emu3_dir)
    if case == "another family":
        tiny_model("llama").save_pretrained(folder)
    args = image_args("lpd" if case == "decoder it cannot run" else "ar", folder, prompt="  " if case == "no prompt"
                      else "a red apple", grid=(None, None) if case == "no grid" else (3, 4))
    refused(generate_image(*args), IMAGE_BLANK, message)


def test_image_tab_without_a_folder_keeps_its_class_stream():
    """An empty folder takes the embedded path (the class dropdown): here the stand-in prior, untouched
    until the handler streams from it."""
    import apps.image
    generate = handler(apps.image.build_demo(UntouchablePrior()), "generate_image")
    refused(generate("square", "ar", "", 2.0, 1.0, 0, False), IMAGE_BLANK, r"^unknown class 'square': pick one of circle$")


# -- the cache every tab shares -----------------------------------------------------------------------

def test_each_folder_loads_once_even_under_concurrent_requests(tmp_path):
    import time

    from apps.pipelines import FolderPipelines, Shared
    calls = []

    def load(folder):
        calls.append(folder)
        time.sleep(0.05)                        # long enough for the other requests to arrive meanwhile
        if folder.endswith("bad"):
            raise ValueError(f"{folder} holds nothing")
        return object()

    for name in ("a", "bad", "c", "d"):
        (tmp_path / name).mkdir()
    pipes = FolderPipelines(Shared("embedded", lambda: pytest.fail("given up front")), load, lambda: "x, y", keep=2)
    got = []
    threads = [threading.Thread(target=lambda: got.append(pipes.get(str(tmp_path / "a")))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(p) for p in got}) == 1
    assert pipes.get(f"  {tmp_path}/b/../a ") is got[0] and len(calls) == 1     # keyed by the resolved path
    assert pipes.get("") == pipes.get(None) == "embedded"
    for _ in range(2):                           # a failed load is not kept: each request retries, same message
        with pytest.raises(ValueError, match=r"bad holds nothing \(this tab loads folders of: x, y\)$"):
            pipes.get(str(tmp_path / "bad"))
    assert pipes.get(str(tmp_path / "a")) is got[0] and len(calls) == 3          # nor does it evict a good one
    pipes.get(str(tmp_path / "c"))
    pipes.get(str(tmp_path / "d"))                                                 # keeps the last two
    assert pipes.get(str(tmp_path / "a")) is not got[0]


# -- Grounding ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ground():
    import apps.grounding
    return handler(apps.grounding.build_demo(Untouchable()), "ground")


def test_grounding_tab_grounds_with_a_folder_like_the_library(ground, paligemma_dir):
    import vision
    from apps.grounding import boxes_html
    image = tiny_vlm.images(1, size=(60, 80))[0]
    want = vision.load_grounding_pipeline(paligemma_dir)(image, "a cat", decoder="ngram")
    picture, boxes, stats = last(ground(image, "a cat", "ngram", "axis-aligned", "", True, str(paligemma_dir)))
    assert want.boxes and boxes == boxes_html(want)
    assert picture.size == (image.width * 6, image.height * 6) and "data-same='true'" in stats


@pytest.mark.parametrize("case, message", [
    ("missing", r"^no model folder '.*nowhere' in this server's models folder"),
    ("another family", r"holds a 'llama' model.*known: Florence2ForConditionalGeneration"),
    ("box decoder", r"^'parallel_box' cannot run on paligemma: .*use one of: ar, jacobi"),
])
def test_grounding_tab_bad_folder_is_a_readable_error(ground, paligemma_dir, tmp_path, case, message):
    from tinymodels import tiny_model
    folder = {"missing": tmp_path / "nowhere", "another family": tmp_path / "llama",
              "box decoder": paligemma_dir}[case]
    if case == "another family":
        tiny_model("llama").save_pretrained(folder)
    decoder = "parallel_box" if case == "box decoder" else "ar"
    refused(ground(tiny_vlm.images(1)[0], "a cat", decoder, "axis-aligned", "", False, str(folder)), GROUND_BLANK,
            message)


# -- Document -----------------------------------------------------------------------------------------

def test_document_tab_bad_folder_is_a_readable_error(tmp_path, paligemma_dir):
    import apps.document
    read = handler(apps.document.build_demo(Untouchable()), "read_document")
    page = tmp_path / "page.png"
    tiny_vlm.images(1, size=(60, 80))[0].save(page)
    (tmp_path / "empty").mkdir()
    refused(read(str(page), "ar", "", False, str(tmp_path / "empty")), READ_BLANK,
            r"empty has no config.json: pass a model folder saved with save_pretrained \(this tab loads folders of: got_ocr2")
    refused(read(str(page), "ar", "", False, str(paligemma_dir)), READ_BLANK,
            r"^a 'paligemma' model does not read pages here; page-reading families: got_ocr2")


# -- Speech -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def speech_tab():
    import apps.speech
    return apps.speech.build_demo(apps.speech.SpeechPipelines(Untouchable(), Untouchable()))


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper")
    save_tiny_whisper(folder)
    return folder


def test_speech_tab_transcribes_with_a_whisper_folder_like_the_library(speech_tab, whisper_dir):
    import speech
    audio = (0.1 * np.random.default_rng(0).standard_normal(11200)).astype(np.float32)
    want = speech.load_asr(whisper_dir)(audio, 16000, decoder="ngram")
    transcript, ar_transcript, stats = last(handler(speech_tab, "transcribe")((16000, audio), "ngram", True,
                                                                                str(whisper_dir)))
    assert transcript == ar_transcript == want.text
    assert "data-same='true'" in stats


def test_speech_tab_speaks_with_a_musicgen_folder_like_the_library(speech_tab, tmp_path):
    import speech
    save_tiny_musicgen(tmp_path)
    want = speech.load_tts(tmp_path)("hello there", decoder="delay", temperature=0.7, seed=0)
    audio, grid, ar_audio, _, heard, stats = last(handler(speech_tab, "speak")("hello there", "delay", 0.7, 0, True,
                                                                               str(tmp_path)))
    assert audio[0] == want.sample_rate and len(audio[1]) == len(want.audio)
    assert np.array_equal(audio[1], (np.clip(want.audio, -1, 1) * 32767).astype(np.int16))
    assert ar_audio is None and heard == ""              # no flat baseline in MusicGen; our recogniser hears our TTS only
    assert grid is not None and "<tr data-decoder='delay'" in stats


@pytest.mark.parametrize("part, args, blank, message", [
    ("speak", ("hi", "delay", 0.7, 0, False), SPEAK_BLANK,
     r"no TTS weights in .*empty.*this tab loads folders of: musicgen \(MusicgenForConditionalGeneration\), dia"),
    ("transcribe", ("recording", "ar", False), HEAR_BLANK,
     r"no ASR weights in .*empty.*this tab loads folders of: whisper \(WhisperForConditionalGeneration\)\)$"),
    ("transcribe", ("recording", "ctc_speculative", False), HEAR_BLANK,
     r"^decoder 'ctc_speculative' does not run on a Whisper checkpoint; choose one of: ar"),
])
def test_speech_tab_bad_folder_is_a_readable_error(speech_tab, whisper_dir, tmp_path, part, args, blank, message):
    folder = whisper_dir if args[1] == "ctc_speculative" else tmp_path / "empty"
    folder.mkdir(exist_ok=True)
    if args[0] == "recording":
        args = ((16000, (0.1 * np.random.default_rng(0).standard_normal(8000)).astype(np.float32)), *args[1:])
    refused(handler(speech_tab, part)(*args, str(folder)), blank, message)


def test_text_tab_says_which_decoders_auto_ran(generate, tiny_dir):
    """Issue 40, finding 9: the Text tab's result names the decoders `auto` used."""
    *_, stats = last(generate(*text_args("def fib(n):", "auto", tiny_dir, compare=False)))
    assert re.search(r"auto ran (ngram|lookahead|ar|eagle) \d+ steps?", stats), stats
