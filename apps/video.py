"""Video tab: class- and motion-conditional clips (per-frame VQ codes + the AR video prior) with any
video decoder; frames appear as they complete, beside a grid of per-frame heatmaps of the forward
that decided each code, and the finished clip plays (MP4).

    import apps.video
    apps.video.build_demo().launch()         # loads vision.load_video_pipeline() (embedded weights)
"""
from __future__ import annotations

import os
import tempfile
import uuid

import gradio as gr
import numpy as np

import suite
from vision.video.pipeline import DEFAULT_DECODER  # vision.generate_video's and the API's default too
from suite.runtime.options import format_options, parse_options, ui_options

from .errors import guarded
from .inputs import positive_int
from .pictures import nearest_resize, step_colours, with_scale_bar
from .pipelines import Shared
from .summary import stats_row, summary_html
from .timing import TimedIterator, race, throttled

TITLE = "Video"
HIDDEN_OPTIONS = ("adaptive", "max_window")       # refused or meaningless on video grids
FRAME_PX = 128                  # each frame (and its heatmap) is shown upscaled (nearest) to this width
PER_ROW = 4                     # frames per row of the pictures
VIDEO_SCALE = 4                 # the MP4 enlarges 64x64 frames to 256x256
CLIP_PX = 320                   # the player's height
FPS = 8.0
DEFAULT_FRAMES = 4             # a first clip in seconds, not minutes (ar: one forward per code)
UPDATE_EVERY_S = 0.1
# (class, motion, frames) whose seed-0 clips (diagonal, default sampling, frame 0 by the image prior) the motion
# classifier and the image classifier read as asked, with the shipped priors (7-8 of 8 frames; 2026-12-06)
EXAMPLES = [["circle", "right", 8], ["star", "left", 8], ["square", "down", 8], ["triangle", "up", 8],
            ["checker", "up", 8], ["star", "rotate", 8]]


def load_pipeline():
    import vision
    return vision.load_video_pipeline()


def decoder_choices() -> list[str]:
    from vision.video.pipeline import DECODERS
    return list(DECODERS)


def default_options(name: str) -> str:
    from vision.video.pipeline import VIDEO_DEFAULTS
    if name not in suite.DECODERS:
        return ""
    shown = {k: v for k, v in ui_options(name, VIDEO_DEFAULTS.get(name)).items() if k not in HIDDEN_OPTIONS}
    return format_options(shown)


def first_frame_choices(pipe) -> list[tuple[str, str]]:
    """Who can draw frame 0 (the pipeline's first_frame values): the image prior where there is one."""
    image = pipe.first_frame_of("auto") == "image"
    return [("image prior", "image")] * image + [("video prior", "video")]


def sampling_defaults(pipe) -> dict:
    """The sampling settings shipped with the video prior (guidance_scale, temperature, top_k)."""
    from vision.video.prior import SAMPLING
    return {**SAMPLING, **pipe.prior.meta.get("sampling", {})}


class VideoRun:
    """Per-request state of one decoder's clip: the frames completed so far and, per code, the
    forward (1-based) that decided it (0 = not yet)."""

    def __init__(self, decoder: str, frames, grid: tuple[int, int, int]):
        self.decoder = decoder
        self.timer = TimedIterator(frames)
        self.frames: list = [None] * grid[0]
        self.codes = np.full(grid, -1, dtype=np.int64)           # (T, H, W)
        self.decided_at = np.zeros(grid, dtype=np.int64)         # (T, H, W)
        self.stats = suite.DecodeStats()
        self.file: str | None = None                             # the finished clip's MP4

    @property
    def done(self) -> bool:
        return self.timer.done

    def advance(self) -> None:
        frame = self.timer.step()
        if frame is None:
            return
        self.frames[frame.index] = frame.image
        self.codes[frame.index] = frame.codes.cpu().numpy()
        self.decided_at[frame.index] = frame.decided_at.cpu().numpy()
        self.stats = frame.stats

    def row(self) -> dict:
        return stats_row(self.decoder, self.stats, self.timer.elapsed, self.done)

    def clip_file(self, folder: str) -> str | None:
        """The finished clip as an MP4 (H.264) in `folder`; None until every frame is there."""
        if not self.done or any(f is None for f in self.frames):
            return None
        if self.file is None:
            from vision.video.io import write_video
            self.file = write_video(os.path.join(folder, f"{self.decoder}-{uuid.uuid4().hex[:8]}.mp4"),
                                    self.frames, FPS, VIDEO_SCALE)
        return self.file


def tiles(pictures: list, width: int = FRAME_PX, per_row: int = PER_ROW):
    """PIL pictures (None: a grey tile, not there yet) -> one picture, `per_row` a row, numbered."""
    from PIL import Image, ImageDraw
    from .pictures import font
    cells = [nearest_resize(p, width) if p is not None else Image.new("RGB", (width, width), (200, 200, 200))
             for p in pictures]
    cols, rows, gap, label = min(per_row, len(cells)), -(-len(cells) // per_row), 4, 18
    out = Image.new("RGB", (cols * (width + gap) - gap, rows * (width + label + gap) - gap), "white")
    draw, f = ImageDraw.Draw(out), font(13)
    for i, cell in enumerate(cells):
        x, y = (i % per_row) * (width + gap), (i // per_row) * (width + label + gap)
        draw.text((x, y + 1), f"frame {i}", fill=(20, 20, 20), font=f)
        out.paste(cell.convert("RGB"), (x, y + label))
    return out


def heatmap_grid(decided_at: np.ndarray, forwards: int):
    """(T, H, W) forward indices -> one heatmap per frame, all on this run's own scale (forward 1
    dark to `forwards` yellow, grey where undecided), with that scale drawn below."""
    from PIL import Image
    forwards = max(forwards, 1)
    grid = tiles([Image.fromarray(step_colours(d, forwards)) for d in decided_at])
    return with_scale_bar(grid, forwards)


def same_clip(runs: list[VideoRun]) -> tuple[bool, str, bool] | None:
    if len(runs) < 2 or not all(r.done for r in runs):
        return None
    return bool(np.array_equal(runs[0].codes, runs[1].codes)), "clip (codes)", True


def build_demo(pipeline=None) -> gr.Blocks:
    """The Video tab. `pipeline` is a `vision.VideoPipeline`; None loads the embedded one (once, at
    build time: classes, motions and frames come from it). Nothing decodes until Generate."""
    shared = Shared(pipeline, load_pipeline)
    pipe = shared.get()
    classes, motions, max_frames = list(pipe.classes), list(pipe.motions), pipe.max_frames
    lay = pipe.prior.layout
    defaults = sampling_defaults(pipe)
    folder = tempfile.mkdtemp(prefix="parasuite-video-")      # the finished clips, served by Gradio

    def generate(label, motion, frames, decoder, options, guidance, temperature, seed, compare, first_frame="auto"):
        if decoder not in decoder_choices():
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(decoder_choices())}")
        if label not in classes:
            raise ValueError(f"unknown class {label!r}: pick one of {', '.join(classes)}")
        if motion not in motions:
            raise ValueError(f"unknown motion {motion!r}: pick one of {', '.join(motions)}")
        frames = positive_int("frames", frames)
        if frames > max_frames:
            raise ValueError(f"frames must be 1..{max_frames} (the prior was trained on {max_frames}-frame clips), "
                             f"got {frames}")
        args = dict(motion=motion, num_frames=frames, guidance_scale=float(guidance), temperature=float(temperature),
                    seed=None if seed in (None, "") else int(seed), first_frame=pipe.first_frame_of(first_frame))
        grid = (frames, lay.height, lay.width)
        chosen_options = parse_options(decoder, options)
        runs = [VideoRun(decoder, pipe.stream([label], decoder=decoder, **args, **chosen_options), grid)]
        if compare and decoder != "ar":
            runs.insert(0, VideoRun("ar", pipe.stream([label], decoder="ar", **args), grid))
        chosen, baseline = runs[-1], (runs[0] if len(runs) == 2 else None)

        def view():       # each heatmap grid on its own scale: its own forwards, dark first, yellow last
            shown = [chosen.clip_file(folder), tiles(chosen.frames),
                     heatmap_grid(chosen.decided_at, chosen.stats.num_forwards)]
            shown += ([baseline.clip_file(folder), tiles(baseline.frames),
                       heatmap_grid(baseline.decided_at, baseline.stats.num_forwards)] if baseline else [None] * 3)
            return (*shown, summary_html([r.row() for r in runs], "video", decoder, same_clip(runs),
                                         f"class {label}, motion {motion}, {frames} frames, seed {args['seed']}, "
                                         f"frame 0 by the {args['first_frame']} prior"))

        yield view()
        for _ in throttled(race(runs), UPDATE_EVERY_S):
            yield view()

    with gr.Blocks(title="parasuite: video") as demo:
        gr.Markdown(f"Class- and motion-conditional clips from our AR video prior ({max_frames} frames of "
                    f"{lay.height}x{lay.width} codes). Frames appear as they complete; the heatmaps show the forward "
                    "that decided each code (dark = the first forward, yellow = the last; each run on its own "
                    "scale, drawn below it). The clip plays once every frame is there.")
        with gr.Row():
            with gr.Column(scale=2):
                with gr.Row():
                    label = gr.Dropdown(classes, value=classes[0], label="Class", elem_id="video-class")
                    motion = gr.Dropdown(motions, value="right" if "right" in motions else motions[0],
                                         label="Motion", elem_id="video-motion")
                frames = gr.Slider(1, max_frames, value=min(DEFAULT_FRAMES, max_frames), step=1, label="Frames",
                                   elem_id="video-frames")
                compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="video-compare")
                first_frame = gr.Radio(first_frame_choices(pipe), value=pipe.first_frame_of("auto"),
                                       label="Frame 0 drawn by", elem_id="video-first-frame",
                                       info="the image prior keeps the class far more often; the video prior "
                                            "continues from its frame")
                run = gr.Button("Generate", variant="primary", elem_id="video-run")
                shown = [e for e in EXAMPLES if e[0] in classes and e[1] in motions and e[2] <= max_frames]
                if shown:                       # another prior (other classes, fewer frames): none
                    gr.Examples(shown, [label, motion, frames], label="Examples (the motion asked for)")
            with gr.Column(scale=2):
                decoder = gr.Dropdown(decoder_choices(), value=DEFAULT_DECODER, label="Decoder",
                                      elem_id="video-decoder")
                options = gr.Textbox(value=default_options(DEFAULT_DECODER), label="Decoder options",
                                     info="key=value, separated by commas", elem_id="video-options")
                with gr.Accordion("Sampling", open=False):
                    guidance = gr.Slider(1.0, 8.0, value=defaults["guidance_scale"], step=0.25,
                                         label="Guidance scale (1 = none)")
                    temperature = gr.Slider(0.05, 2.0, value=defaults["temperature"], step=0.05, label="Temperature")
                    seed = gr.Number(value=0, precision=0, label="Seed (empty = random)")
        stats = gr.HTML(label="Stats", elem_id="video-stats")
        with gr.Row():
            with gr.Column():
                gr.Markdown("**chosen decoder**")
                clip = gr.Video(label="Clip", elem_id="video-output", autoplay=True, loop=True, height=CLIP_PX)
                strip = gr.Image(label="Frames", type="pil", elem_id="video-frames-output")
                steps = gr.Image(label="Decided at forward", type="pil", elem_id="video-steps")
            with gr.Column(visible=False) as ar_column:
                gr.Markdown("**ar baseline**")
                ar_clip = gr.Video(label="Clip (ar)", elem_id="video-ar-output", autoplay=True, loop=True,
                                   height=CLIP_PX)
                ar_strip = gr.Image(label="Frames (ar)", type="pil", elem_id="video-ar-frames-output")
                ar_steps = gr.Image(label="Decided at forward (ar)", type="pil", elem_id="video-ar-steps")

        decoder.change(default_options, decoder, options, queue=False, api_visibility="private")
        compare.change(lambda on: gr.Column(visible=bool(on)), compare, ar_column, queue=False,
                       api_visibility="private")
        run.click(guarded("video generation", generate, blank=(None,) * 6 + ("",)),
                  [label, motion, frames, decoder, options, guidance, temperature, seed, compare, first_frame],
                  [clip, strip, steps, ar_clip, ar_strip, ar_steps, stats], api_name="generate_video")
    return demo
