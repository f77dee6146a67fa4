"""Concurrent requests never see each other's state: for every pipeline, N requests with different
inputs run at once in threads (as the app serves them), and each output equals its serial output."""
import random
from concurrent.futures import ThreadPoolExecutor

N = 3


def serial_and_concurrent(request, inputs):
    serial = [request(x) for x in inputs]
    with ThreadPoolExecutor(N) as pool:
        concurrent = list(pool.map(request, inputs))
    return serial, concurrent


def check(request, inputs):
    serial, concurrent = serial_and_concurrent(request, inputs)
    assert len(set(map(repr, serial))) > 1, "inputs must give different outputs to catch a mix-up"
    assert concurrent == serial


def test_text():
    import text
    gen = text.load()
    check(lambda p: gen.generate(p, decoder="ngram", max_new_tokens=4).text,
          ["def fib(n):", "The capital of France is", "1, 2, 3,"])


def test_image():
    import vision
    pipe = vision.load_image_pipeline()
    check(lambda label: pipe([label], decoder="lpd", seed=0).tokens.tolist(), ["circle", "star", "checker"])


def test_grounding():
    import vision
    from vision.grounding import data
    grd = vision.load_grounding_pipeline()
    image = data.scene("test", 17, "aabb").image
    check(lambda q: grd(image, q, decoder="hybrid").boxes, ["the ring", "the blue square", "the red circle"])


def test_ocr():
    import document
    from document import data
    ocr = document.load_ocr()
    lines = [data.render_line(text, random.Random(i), clean_style=True)
             for i, text in enumerate(["Hello there", "Parallel decoding", "42 apples"])]
    check(lambda im: ocr([im], decoder="ctc_speculative").texts, lines)


def test_tts():
    import speech
    tts = speech.load_tts()
    check(lambda t: tts(t, decoder="delay", seed=0, max_seconds=1.0).codes.tolist(), ["Hello there.", "Good morning.", "Yes."])


def test_asr():
    import speech
    tts, asr = speech.load_tts(), speech.load_asr()
    clips = [tts(t, decoder="parallel", seed=0, max_seconds=2.0) for t in ("Hello there.", "Good morning.", "Thank you.")]
    check(lambda c: asr(c.audio, c.sample_rate, decoder="ctc_speculative").text, clips)
