"""Speech tab: text to speech with codebook-parallel decoders (the codebook grid coloured by the
forward that decided each code, the waveform and a player), and speech recognition of the result or
of any recording.

    import apps.speech
    apps.speech.build_demo().launch()        # loads speech.load_tts() and speech.load_asr()

Each part has its own "Model folder": a MusicGen, Dia or CSM folder speaks through speech.load_tts(folder),
a Whisper folder transcribes through speech.load_asr(folder), each loaded once per folder.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import gradio as gr
import numpy as np

from speech.asr import DEFAULT_DECODER as DEFAULT_ASR   # the fastest lossless ones (python -m speech.asr /
from speech.tts import DEFAULT_DECODER as DEFAULT_TTS   # speech.tts use them too: one default per modality)

from .errors import guarded
from .folders import folder_field
from .inputs import checked_input, require_text
from .pictures import font, step_colours, with_scale_bar
from .pipelines import FolderPipelines, Shared
from .summary import Guarantee, stats_row, summary_html

TITLE = "Speech"
BASELINE_TTS = "flat"          # one code per forward: the AR baseline of the TTS decoders
BASELINE_ASR = "ar"
EXAMPLE_TEXT = "Return a list of cookies."
GRID_PX, LABEL_PX, ROW_PX = 640, 100, 30      # codebook grid: width, codebook labels, height of each codebook row
# readers that are not registry decoders: the flat model (the TTS baseline, shown as ar) and the CTC head
OWN = {"flat": Guarantee("reference", "one code per forward on the flat model (tts_flat)"),
       "ctc": Guarantee("lossy", "greedy CTC head: no decoder forward, the encoder's own reading"),
       "ctc_beam": Guarantee("lossy", "CTC prefix beam search with a character 6-gram LM: no decoder forward")}


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


def load_tts_folder(folder: str):
    """A user's TTS folder, as `python -m speech.tts --model FOLDER` loads it."""
    import speech
    return speech.load_tts(folder)


def load_asr_folder(folder: str):
    """A user's recogniser folder, as `python -m speech.asr --model FOLDER` loads it."""
    import speech
    return speech.load_asr(folder)


def tts_families() -> str:
    from speech.tts import tts_families as families
    return ", ".join(f"{kind} ({classes[0]})" for kind, classes in families().items())


def asr_families() -> str:
    from speech.hf_asr import FAMILIES
    return ", ".join(f"{kind} ({classes[0]})" for kind, classes in FAMILIES.items())


def tts_decoders(tts) -> list[str]:
    return list(tts.decoders)


def asr_decoders() -> list[str]:
    """Ours, then a Whisper folder's (python -m speech.asr's choices)."""
    from speech.asr import DECODERS
    from speech.hf_asr import DECODERS as WHISPER
    return list(DECODERS) + [d for d in WHISPER if d not in DECODERS]


# -- the recording: read by the suite's own reader (soundfile), not Gradio's ffprobe path --------------

AUDIO_FIX = "record again, or upload a WAV (any sample format), FLAC or OGG file"


def read_recording(payload) -> tuple[int, np.ndarray]:
    """(sample rate, float32 samples) of an upload or a microphone recording, read by speech.audio's
    reader (soundfile: WAV of any sample format, FLAC, OGG), so no ffmpeg is needed."""
    from speech.audio import read_audio
    path = getattr(payload, "path", None)
    if not path or not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise ValueError("empty file")
    audio, rate = read_audio(path)
    if audio.size == 0:
        raise ValueError("no samples")
    return int(rate), audio


def audio_input(**kwargs) -> gr.Audio:
    """gr.Audio(type="numpy", **kwargs) read by read_recording; a file it cannot read (empty, cut short,
    not audio) is refused naming the field and the fix."""
    return checked_input(gr.Audio(type="numpy", **kwargs), "the file is empty, cut short or not audio", AUDIO_FIX,
                         read=read_recording)


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


def codebook_grid(decoder: str, result) -> object:
    """The (Q, T) codes as cells coloured by the forward that decided them, each codebook a labelled
    row, on this run's own scale (forward 1 to its last), drawn below the grid."""
    from PIL import Image, ImageDraw
    num_codebooks, frames = result.codes.shape
    steps = decided_steps(decoder, result.stats.accepted_lengths, num_codebooks, frames)
    forwards = max(result.stats.num_forwards, 1)
    cells = Image.fromarray(step_colours(steps, forwards)).resize((GRID_PX - LABEL_PX, ROW_PX * num_codebooks),
                                                                   Image.NEAREST)
    grid = Image.new("RGB", (GRID_PX, cells.height), "white")
    grid.paste(cells, (LABEL_PX, 0))
    draw, f = ImageDraw.Draw(grid), font(15)
    for q in range(num_codebooks):
        draw.text((4, q * ROW_PX + (ROW_PX - 15) // 2), f"codebook {q + 1}", fill=(20, 20, 20), font=f)
    return with_scale_bar(grid, forwards)


# -- the app ------------------------------------------------------------------------------------------

def build_demo(pipeline: SpeechPipelines | None = None) -> gr.Blocks:
    """The Speech tab. `pipeline` holds the TTS and ASR; None loads the embedded ones (once, at build
    time: the decoder lists come from them); each part's model folder loads its own (once per folder)."""
    shared = Shared(pipeline, load_pipeline)
    pipes = shared.get()
    tts, asr = pipes.tts, pipes.asr
    tts_pipelines = FolderPipelines(Shared(tts, lambda: None), load_tts_folder, tts_families)   # ours: loaded above
    asr_pipelines = FolderPipelines(Shared(asr, lambda: None), load_asr_folder, asr_families)

    def speak(text, decoder, temperature, seed, compare, model_folder=""):
        if tts is None:
            raise ValueError("text to speech is not available: train it with `python -m speech.train tts`")
        if decoder not in tts_decoders(tts):
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(tts_decoders(tts))}")
        require_text("text", text, "type a sentence to speak")
        args = dict(temperature=float(temperature), seed=None if seed in (None, "") else int(seed))
        speaker = tts_pipelines.get(model_folder)     # a family refuses a decoder it cannot run, naming its own
        names = ([BASELINE_TTS] if compare and decoder != BASELINE_TTS and BASELINE_TTS in tts_decoders(speaker)
                 else []) + [decoder]          # the baseline first, as in every tab
        results = {}
        for name in names:                     # short utterances: each result comes whole
            results[name] = speaker(text, decoder=name, **args)
            yield speech_view(results, decoder, None)
        # our recogniser hears our own voice; a family's audio (music, other voices) is not its to judge
        heard = asr(results[decoder].audio, results[decoder].sample_rate).text \
            if asr is not None and speaker is tts else None
        yield speech_view(results, decoder, heard)

    def transcribe(recording, decoder, compare, model_folder=""):
        if asr is None:
            raise ValueError("speech recognition is not available: train it with `python -m speech.train asr`")
        if decoder not in asr_decoders():
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(asr_decoders())}")
        if recording is None:
            raise ValueError("no audio: record or upload a clip to transcribe")
        sample_rate, audio = recording
        listener = asr_pipelines.get(model_folder)    # a Whisper refuses our CTC readers, naming its decoders
        names = ([BASELINE_ASR] if compare and decoder != BASELINE_ASR else []) + [decoder]
        rows, texts = [], {}
        for name in names:
            res = listener(audio, int(sample_rate), decoder=name)
            rows.append(stats_row(name, res.stats, res.stats.wall_time_s, True))
            texts[name] = res.text
            same = (texts[BASELINE_ASR] == texts[decoder], "text", False) if len(texts) == 2 else None
            # the chosen decoder's transcript alone, ar's (compare on) in its own output: API clients get
            # each text as it is, and the stats apart from both
            yield (texts.get(decoder, ""), texts.get(BASELINE_ASR, "") if decoder != BASELINE_ASR else "",
                   summary_html(rows, "asr", decoder, same, own=OWN))

    with gr.Blocks(title="parasuite: speech") as demo:
        if tts is not None:
            speak_section(tts, speak)
        if asr is not None:
            transcribe_section(transcribe)
    return demo


def speak_section(tts, speak) -> None:
    gr.Markdown("Text to speech with our codec (several codebooks per frame): *delay* staggers the codebooks "
                "(exact for its own model), *parallel* decides all codebooks of a frame in one forward, "
                "*flat* (the AR baseline) decides one code per forward. Each grid shows codebooks (rows) by "
                "frames (columns), coloured by the forward that decided each code on its own scale "
                "(dark = its first forward, yellow = its last). Tokens in the table are codes (codebooks x frames).")
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(value=EXAMPLE_TEXT, label="Text to speak", lines=2, elem_id="speech-text")
            compare = gr.Checkbox(value=False, label="Compare with AR (flat)", elem_id="speech-compare")
            run = gr.Button("Speak", variant="primary", elem_id="speech-run")
        with gr.Column(scale=2):
            choices = tts_decoders(tts)
            decoder = gr.Dropdown(choices, value=DEFAULT_TTS if DEFAULT_TTS in choices else choices[0],
                                  label="Decoder", elem_id="speech-decoder")
            temperature = gr.Slider(0.05, 1.5, value=0.7, step=0.05, label="Temperature")
            seed = gr.Number(value=0, precision=0, label="Seed (empty = random)")
            model_folder = folder_field("speech-model-folder", "our TTS", "MusicGen, Dia or CSM")
    stats = gr.HTML(label="Stats", elem_id="speech-stats")
    with gr.Row():
        with gr.Column():
            player = gr.Audio(label="Speech", type="numpy", interactive=False, elem_id="speech-audio")
            heard = gr.Textbox(label="Heard by the recogniser", interactive=False, elem_id="speech-heard")
            grid = gr.Image(label="Codes, by forward", type="pil", elem_id="speech-grid")
        with gr.Column(visible=False) as ar_column:
            ar_player = gr.Audio(label="Speech (ar baseline)", type="numpy", interactive=False,
                                 elem_id="speech-ar-audio")
            ar_grid = gr.Image(label="Codes, by forward (ar)", type="pil", elem_id="speech-ar-grid")
    run.click(guarded("speech synthesis", speak, blank=(None, None, None, None, "", "")),
              [text, decoder, temperature, seed, compare, model_folder],
              [player, grid, ar_player, ar_grid, heard, stats], api_name="speak")
    compare.change(lambda on: gr.Column(visible=bool(on)), compare, ar_column, queue=False, api_visibility="private")


def transcribe_section(transcribe) -> None:
    gr.Markdown("### Transcribe a recording\nSpeech recognition: *ctc_speculative* drafts the whole transcript "
                "from the CTC head and verifies it in one forward; *ar* decodes one character per forward.")
    with gr.Row():
        recording = audio_input(label="Audio to transcribe", sources=["upload", "microphone"],
                                elem_id="speech-recording")
        with gr.Column():
            decoder = gr.Dropdown(asr_decoders(), value=DEFAULT_ASR if DEFAULT_ASR in asr_decoders() else
                                  asr_decoders()[-1], label="Recognition decoder", elem_id="speech-asr-decoder")
            compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="speech-asr-compare")
            model_folder = folder_field("speech-asr-model-folder", "our recogniser", "Whisper")
            listen = gr.Button("Transcribe", elem_id="speech-transcribe")
    with gr.Row():
        transcript = gr.Textbox(label="Transcript", interactive=False, elem_id="speech-transcript")
        ar_transcript = gr.Textbox(label="Transcript (ar baseline)", interactive=False, visible=False,
                                   elem_id="speech-ar-transcript")
    stats = gr.HTML(label="Recognition stats", elem_id="speech-asr-stats")
    compare.change(lambda on: gr.Textbox(visible=bool(on)), compare, ar_transcript, queue=False,
                   api_visibility="private")
    listen.click(guarded("speech recognition", transcribe, blank=("", "", "")),
                 [recording, decoder, compare, model_folder], [transcript, ar_transcript, stats], api_name="transcribe")


def speech_view(results: dict, decoder: str, heard: str | None):
    """(player, grid, ar player, ar grid, heard, stats) for the results so far, the baseline's first."""
    def audio(res):
        return res.sample_rate, (np.clip(res.audio, -1, 1) * 32767).astype(np.int16)

    res = results.get(decoder)
    base = results.get(BASELINE_TTS) if decoder != BASELINE_TTS else None
    rows = [stats_row("ar" if name == BASELINE_TTS else name, r.stats, r.stats.wall_time_s, True,
                      tokens=int(r.codes.numel()))            # codes (Q x T), whatever the layout
            for name, r in results.items()]
    same = None
    if res is not None and base is not None:
        same = (tuple(res.codes.shape) == tuple(base.codes.shape) and bool((res.codes == base.codes).all()),
                "codes", True)
    table = summary_html(rows, "speech", decoder, same, own=OWN) if res is not None else ""
    return (audio(res) if res is not None else None, codebook_grid(decoder, res) if res is not None else None,
            audio(base) if base is not None else None, codebook_grid(BASELINE_TTS, base) if base is not None else None,
            heard or "", table)
