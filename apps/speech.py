"""Speech tab: text to speech with codebook-parallel decoders (the codebook grid coloured by the
forward that decided each code, the waveform and a player), and speech recognition of the result or
of any recording.

    import apps.speech
    apps.speech.build_demo().launch()        # loads speech.load_tts() and speech.load_asr()
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import gradio as gr
import numpy as np

from ._common import Shared, add_speedups, guarded, stats_row, stats_table, step_colours

TITLE = "Speech"
BASELINE_TTS = "flat"          # one code per forward: the AR baseline of the TTS decoders
BASELINE_ASR = "ar"
EXAMPLE_TEXT = "Return a list of cookies."
GRID_PX = 720                  # codebook grid and waveform width on screen


@dataclass
class SpeechPipelines:
    tts: object | None         # speech.TTS, or None when its weights are missing
    asr: object | None         # speech.ASR, or None when its weights are missing


def load_pipeline() -> SpeechPipelines:
    """TTS and ASR, each when its weights load; the tab needs at least one."""
    import speech
    loaded, why = {}, {}
    for name, load in (("tts", speech.load_tts), ("asr", speech.load_asr)):
        try:
            loaded[name] = load()
        except Exception as e:
            loaded[name], why[name] = None, f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    if not any(loaded.values()):
        raise ValueError(f"neither TTS ({why['tts']}) nor ASR ({why['asr']}) loaded")
    for name, reason in why.items():
        print(f"apps: Speech tab without {name.upper()}: {reason}", file=sys.stderr)
    return SpeechPipelines(**loaded)


def tts_decoders(tts) -> list[str]:
    return list(tts.decoders)


def asr_decoders() -> list[str]:
    from speech.asr import DECODERS
    return list(DECODERS)


# -- pictures -----------------------------------------------------------------------------------------

def decided_steps(decoder: str, accepted_lengths: list[list[int]], num_codebooks: int, frames: int) -> np.ndarray:
    """(Q, T) forward (1-based) that decided each code, from how many items each forward committed
    and the decoder's layout: flat commits codes in order t*Q+q, delay commits column j = codebook q of
    frame j-q, parallel commits whole frames."""
    per_step = [step[0] for step in accepted_lengths]
    step_of_item = np.repeat(np.arange(1, len(per_step) + 1), per_step)          # (items,)
    q, t = np.meshgrid(np.arange(num_codebooks), np.arange(frames), indexing="ij")  # (Q, T)
    item = {"flat": t * num_codebooks + q, "delay": t + q}.get(decoder, t)
    out = np.zeros((num_codebooks, frames), dtype=np.int64)
    ok = item < len(step_of_item)
    out[ok] = step_of_item[item[ok]]
    return out


def codebook_grid(decoder: str, result, scale: int | None = None) -> object:
    """The (Q, T) codes as cells coloured by the forward that decided them, on a ramp over `scale`
    forwards (default: this run's own)."""
    from PIL import Image
    num_codebooks, frames = result.codes.shape
    steps = decided_steps(decoder, result.stats.accepted_lengths, num_codebooks, frames)
    cells = Image.fromarray(step_colours(steps, scale or result.stats.num_forwards))
    cell = max(1, GRID_PX // max(frames, 1))
    return cells.resize((cell * frames, 12 * num_codebooks), Image.NEAREST)


def waveform(audio: np.ndarray, width: int = GRID_PX, height: int = 120):
    """Min/max envelope of the samples, one column per pixel."""
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    if len(audio) == 0:
        return img
    mid = height / 2
    for x, piece in enumerate(np.array_split(audio, width)):
        if len(piece):
            lo, hi = float(piece.min()), float(piece.max())
            draw.line([(x, mid - hi * mid), (x, mid - lo * mid)], fill=(40, 90, 180))
    return img


# -- the app ------------------------------------------------------------------------------------------

def build_demo(pipeline: SpeechPipelines | None = None) -> gr.Blocks:
    """The Speech tab. `pipeline` holds the TTS and ASR; None loads the embedded ones (once, at build
    time: the decoder lists come from them)."""
    shared = Shared(pipeline, load_pipeline)
    pipes = shared.get()
    tts, asr = pipes.tts, pipes.asr

    def speak(text, decoder, temperature, seed, compare):
        if tts is None:
            raise ValueError("text to speech is not available: train it with `python -m speech.train tts`")
        if decoder not in tts_decoders(tts):
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(tts_decoders(tts))}")
        args = dict(temperature=float(temperature), seed=None if seed in (None, "") else int(seed))
        names = [decoder] + ([BASELINE_TTS] if compare and decoder != BASELINE_TTS
                             and BASELINE_TTS in tts_decoders(tts) else [])
        rows, results = [], {}
        for name in names:                     # short utterances: each result comes whole
            res = tts(text, decoder=name, **args)
            results[name] = res
            rows.append(stats_row(name if name != BASELINE_TTS else "ar", res.stats, res.stats.wall_time_s, True,
                                  tokens=int(res.codes.numel())))     # codes (Q x T), whatever the layout
            yield _speech_view(results, decoder, rows, None)
        heard = asr(results[decoder].audio, results[decoder].sample_rate).text if asr is not None else None
        yield _speech_view(results, decoder, rows, heard)

    def transcribe(recording, decoder, compare):
        if asr is None:
            raise ValueError("speech recognition is not available: train it with `python -m speech.train asr`")
        if recording is None:
            raise ValueError("no audio: record or upload a clip to transcribe")
        sample_rate, audio = recording
        names = [decoder] + ([BASELINE_ASR] if compare and decoder != BASELINE_ASR else [])
        rows, texts = [], []
        for name in names:
            res = asr(audio, int(sample_rate), decoder=name)
            rows.append(stats_row(name, res.stats, res.stats.wall_time_s, True))
            texts.append(f"{name}: {res.text}")
            yield "\n".join(texts), stats_table(add_speedups(rows))

    with gr.Blocks(title="parasuite: speech") as demo:
        if tts is not None:
            speak_section(tts, speak)
        if asr is not None:
            transcribe_section(transcribe, open_=tts is None)
    return demo


def speak_section(tts, speak) -> None:
    gr.Markdown("Text to speech with our codec (several codebooks per frame): *parallel* decides all "
                "codebooks of a frame in one forward, *delay* staggers them, *flat* (the AR baseline) "
                "decides one code per forward. The grid shows codebooks (rows) by frames (columns), "
                "coloured by the forward that decided each code (dark = early, yellow = late). "
                "Tokens in the table are codes (codebooks x frames).")
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(value=EXAMPLE_TEXT, label="Text to speak", lines=2, elem_id="speech-text")
            compare = gr.Checkbox(value=False, label="Compare with AR (flat)", elem_id="speech-compare")
            run = gr.Button("Speak", variant="primary", elem_id="speech-run")
        with gr.Column(scale=2):
            choices = tts_decoders(tts)
            decoder = gr.Dropdown(choices, value="parallel" if "parallel" in choices else choices[0],
                                  label="Decoder", elem_id="speech-decoder")
            temperature = gr.Slider(0.05, 1.5, value=0.7, step=0.05, label="Temperature")
            seed = gr.Number(value=0, precision=0, label="Seed (empty = random)")
    stats = gr.HTML(elem_id="speech-stats")
    player = gr.Audio(label="Speech", type="numpy", interactive=False, elem_id="speech-audio")
    heard = gr.Textbox(label="Heard by the recogniser (ASR of the speech above)", interactive=False,
                       elem_id="speech-heard")
    wave = gr.Image(label="Waveform", type="pil", elem_id="speech-wave")
    grid = gr.Image(label="Codebooks x frames, coloured by forward", type="pil", elem_id="speech-grid")
    ar_grid = gr.Image(label="Codebooks x frames (ar baseline)", type="pil", visible=False,
                       elem_id="speech-ar-grid")
    run.click(guarded("speech synthesis", speak), [text, decoder, temperature, seed, compare],
              [player, wave, grid, ar_grid, heard, stats], api_name="speak")
    compare.change(lambda on: gr.Image(visible=bool(on)), compare, ar_grid, queue=False)


def transcribe_section(transcribe, open_: bool) -> None:
    with gr.Accordion("Transcribe a recording", open=open_):
        gr.Markdown("Speech recognition: *ctc_speculative* drafts the whole transcript from the CTC head and "
                    "verifies it in one forward; *ar* decodes one character per forward.")
        with gr.Row():
            recording = gr.Audio(label="Audio to transcribe", type="numpy", sources=["upload", "microphone"],
                                 elem_id="speech-recording")
            with gr.Column():
                decoder = gr.Dropdown(asr_decoders(), value=asr_decoders()[-1], label="Decoder",
                                      elem_id="speech-asr-decoder")
                compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="speech-asr-compare")
                listen = gr.Button("Transcribe", elem_id="speech-transcribe")
        transcript = gr.Textbox(label="Transcript", interactive=False, elem_id="speech-transcript")
        stats = gr.HTML(elem_id="speech-asr-stats")
        listen.click(guarded("speech recognition", transcribe), [recording, decoder, compare],
                     [transcript, stats], api_name="transcribe")


def _speech_view(results: dict, decoder: str, rows: list[dict], heard: str | None):
    res = results[decoder]
    base = results.get(BASELINE_TTS) if decoder != BASELINE_TTS else None
    audio = (res.sample_rate, (np.clip(res.audio, -1, 1) * 32767).astype(np.int16))
    scale = max(r.stats.num_forwards for r in results.values())     # one scale: the baseline's yellow comes late
    return (audio, waveform(res.audio), codebook_grid(decoder, res, scale),
            codebook_grid(BASELINE_TTS, base, scale) if base is not None else None,
            heard or "", stats_table(add_speedups(rows)))
