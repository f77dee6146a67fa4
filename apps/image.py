"""Image tab: class-conditional image generation (VQ tokenizer + AR prior) with any image decoder;
the picture fills in step by step beside a heatmap of the forward at which each token was decided.

    import apps.image
    apps.image.build_demo().launch()         # loads vision.load_image_pipeline() (embedded weights)

A "Model folder" loads a user's Emu3, Janus or Chameleon folder through vision.hf_image (as
`python -m vision.generate --hf-model FOLDER` does, once per folder): it draws the prompt's image
(over the grid, for Emu3) with the chosen decoder in one call, then shows it.
"""
from __future__ import annotations

import gradio as gr
import numpy as np

import suite
from vision.pipeline import DEFAULT_DECODER  # vision.generate's and the API's default too
from suite.runtime.options import format_options, parse_options, ui_options

from .errors import guarded
from .folders import folder_field
from .inputs import positive_int, require_text
from .pictures import nearest_resize, step_colours, with_scale_bar
from .pipelines import FolderPipelines, Shared
from .summary import stats_row, summary_html
from .timing import TimedIterator, race, throttled

TITLE = "Image"
# the registry's decoders that fill a token grid (text and speech decoders live there too)
UI_DEFAULTS = {"sjd": {"window": 16, "init": "left"}, "mc_sjd": {"window": 16, "init": "left"},
               "zipar": {"window": 3}, "zipar_sjd": {"window": 3, "draft_len": 4}, "lpd": {"steps": 20}}
SHOW_PX = 256                      # pictures are shown upscaled (nearest) to this width
UPDATE_EVERY_S = 0.05


def load_pipeline():
    import vision
    return vision.load_image_pipeline()


def load_folder(folder: str):
    """A user's Emu3/Janus/Chameleon folder, as `python -m vision.generate --hf-model FOLDER` loads it."""
    from vision.hf_image import load_hf_image_model
    return load_hf_image_model(folder)


def folder_families() -> str:
    from vision.hf_image import FAMILIES
    return ", ".join(FAMILIES)


def sampling_defaults(pipe) -> dict:
    """The sampling settings shipped with the prior (guidance_scale, temperature, top_k)."""
    try:
        from vision.pipeline import default_sampling
        return dict(default_sampling(pipe))
    except (ImportError, AttributeError, KeyError):
        return {"guidance_scale": 3.0, "temperature": 1.0, "top_k": None}


def decoder_choices() -> list[str]:
    from vision.pipeline import DECODERS
    return list(DECODERS)


def default_options(name: str) -> str:
    return format_options(ui_options(name, UI_DEFAULTS.get(name))) if name in suite.DECODERS else ""


class ImageRun:
    """Per-request state of one decoder's image stream: the latest picture and, per grid cell, the
    forward (1-based) at which its token was decided (0 = not yet)."""

    def __init__(self, decoder: str, steps, grid: tuple[int, int]):
        self.decoder = decoder
        self.timer = TimedIterator(steps)
        self.decided_at = np.zeros(grid, dtype=np.int64)      # (H, W)
        self.image = None
        self.stats = suite.DecodeStats()

    @property
    def done(self) -> bool:
        return self.timer.done

    def advance(self) -> None:
        step = self.timer.step()
        if step is None:
            return
        known = step.known[0].numpy()                          # (H, W) bool
        # step.index: this step's forward; step.stats are the request's live totals, which the
        # scheduler has moved past this step by the time a slow reader gets it
        self.decided_at[known & (self.decided_at == 0)] = step.index
        self.image, self.stats = step.images[0], step.stats

    def row(self) -> dict:
        return stats_row(self.decoder, self.stats, self.timer.elapsed, self.done)


def upscale(image, width: int = SHOW_PX):
    return nearest_resize(image, width)


def heatmap(decided_at: np.ndarray, forwards: int):
    """(H, W) forward indices -> a PIL picture on its own scale (forward 1 dark to `forwards` yellow,
    grey where undecided), with that scale drawn below it."""
    from PIL import Image
    return with_scale_bar(upscale(Image.fromarray(step_colours(decided_at, forwards))), max(forwards, 1))


# -- a model folder (vision.hf_image): one call per decoder, shown when done ---------------------------

def folder_decoders() -> list[str]:
    """The tab's decoders a model folder runs: lpd needs a prior trained with position queries (ours)."""
    return [n for n in decoder_choices() if n != "lpd"]


def folder_grid(hf, height, width) -> tuple[int, int]:
    """The token grid: Emu3 draws any size (both fields), Janus and Chameleon their own (fields empty)."""
    own = hf.default_grid()
    if not height and not width:
        if own is None:
            raise ValueError(f"{hf.family} draws any size: set the grid's height and width in tokens (e.g. 32 x 32)")
        return own
    grid = positive_int("grid height", height), positive_int("grid width", width)
    if own is not None and grid != tuple(own):
        raise ValueError(f"{hf.family} draws a fixed {own[0]}x{own[1]} grid: clear the grid fields")
    return grid


def folder_request(hf, decoder: str, prompt: str, grid) -> tuple:
    """Check a folder request before it runs: (prompt ids, grid); a decoder the family cannot run,
    an empty prompt or a folder without its processor is a ValueError naming the fix."""
    if decoder not in folder_decoders():
        raise ValueError(f"decoder {decoder!r} does not run on {hf.family} (it needs a prior trained with position "
                         f"queries, as ours is); use one of: {', '.join(folder_decoders())}")
    require_text("prompt", prompt, 'describe the image, e.g. "a red apple"')
    if hf.processor is None:
        raise ValueError("this model folder has no processor (tokenizer) to read the prompt: save the model's "
                         "processor beside it (processor.save_pretrained(folder))")
    return hf.prompt_ids(prompt), folder_grid(hf, *grid)


def folder_view(results: dict, decoder: str, sampled: bool, note: str) -> tuple:
    """The outputs for decoder -> HFImageResult (ar's too with compare; None = still running): the
    images (none for Chameleon: codes only), no step heatmaps (the call is whole), the summary."""
    def picture(res):
        return upscale(res.images[0]) if res is not None and res.images else None

    rows = [stats_row(d, r.stats if r else suite.DecodeStats(), r.stats.wall_time_s if r else 0.0, r is not None)
            for d, r in results.items()]
    ar, chosen = results.get("ar"), results[decoder]
    same = None
    if decoder != "ar" and ar is not None and chosen is not None:
        same = bool(np.array_equal(ar.tokens.cpu().numpy(), chosen.tokens.cpu().numpy())), "image codes", sampled
    if chosen is not None and chosen.images is None:
        note += f"; codes only: transformers ships no {chosen.settings['family']} VQ decoder to draw them"
    return (picture(chosen), None, picture(ar) if decoder != "ar" else None, None,
            summary_html(rows, "image", decoder, same, note))


def same_image(runs: list[ImageRun]) -> tuple[bool, str, bool] | None:
    if len(runs) < 2 or not all(r.done and r.image is not None for r in runs):
        return None
    return bool(np.array_equal(np.asarray(runs[0].image), np.asarray(runs[1].image))), "image", True


def build_demo(pipeline=None) -> gr.Blocks:
    """The Image tab. `pipeline` is a `vision.ImagePipeline`; None loads the embedded one (once, at
    build time: the class list comes from it)."""
    shared = Shared(pipeline, load_pipeline)
    pipe = shared.get()
    classes = list(pipe.classes)
    defaults = sampling_defaults(pipe)
    folders = FolderPipelines(shared, load_folder, folder_families)

    def generate(label, decoder, options, guidance, temperature, seed, compare, model_folder="", prompt="",
                 grid_height=None, grid_width=None):
        if decoder not in decoder_choices():
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(decoder_choices())}")
        if (model_folder or "").strip():
            yield from generate_with_folder(folders.get(model_folder), decoder, options, guidance, temperature, seed,
                                            compare, prompt, (grid_height, grid_width))
            return
        if label not in classes:
            raise ValueError(f"unknown class {label!r}: pick one of {', '.join(classes)}")
        args = dict(guidance_scale=float(guidance), temperature=float(temperature),
                    seed=None if seed in (None, "") else int(seed))
        runs = [ImageRun(decoder, pipe.stream([label], decoder=decoder, **args, **parse_options(decoder, options)),
                         pipe.grid)]
        if compare and decoder != "ar":
            runs.insert(0, ImageRun("ar", pipe.stream([label], decoder="ar", **args), pipe.grid))
        chosen, baseline = runs[-1], (runs[0] if len(runs) == 2 else None)

        def view():       # each heatmap on its own scale: its own forwards, dark first, yellow last
            pictures = [upscale(chosen.image), heatmap(chosen.decided_at, chosen.stats.num_forwards)]
            pictures += ([upscale(baseline.image), heatmap(baseline.decided_at, baseline.stats.num_forwards)]
                         if baseline else [None, None])
            return (*pictures, summary_html([r.row() for r in runs], "image", decoder, same_image(runs),
                                            f"class {label}, seed {args['seed']}"))

        yield view()
        for _ in throttled(race(runs), UPDATE_EVERY_S):
            yield view()

    def generate_with_folder(hf, decoder, options, guidance, temperature, seed, compare, prompt, grid):
        ids, grid = folder_request(hf, decoder, prompt, grid)
        args = dict(grid=grid, guidance_scale=float(guidance), temperature=float(temperature),
                    seed=None if seed in (None, "") else int(seed))
        runs = {"ar": {}} if compare and decoder != "ar" else {}
        runs[decoder] = parse_options(decoder, options)             # decoder -> its options, ar first
        results = dict.fromkeys(runs)
        note = f"{hf.family}, prompt {prompt!r}, {grid[0]}x{grid[1]} tokens, seed {args['seed']}"
        yield folder_view(results, decoder, args["temperature"] > 0, note)
        for name, opts in runs.items():
            results[name] = hf.generate(ids, decoder=name, **args, **opts)
            yield folder_view(results, decoder, args["temperature"] > 0, note)

    with gr.Blocks(title="parasuite: image") as demo:
        h, w = pipe.grid
        gr.Markdown(f"Class-conditional images from our VQ tokenizer + AR prior ({h}x{w} tokens). Parallel "
                    "decoders decide several tokens per forward; the heatmap shows when each was decided "
                    "(dark = its first forward, yellow = its last; each heatmap on its own scale, drawn below it).")
        with gr.Row():
            with gr.Column(scale=2):
                label = gr.Dropdown(classes, value=classes[0], label="Class", elem_id="image-class")
                with gr.Row():
                    compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="image-compare")
                with gr.Accordion("Your own model", open=False):
                    model_folder = folder_field("image-model-folder", "our class-conditional prior",
                                                "Emu3, Janus or Chameleon", "it draws the prompt, not the class")
                    prompt = gr.Textbox(value="", label="Prompt", placeholder="a red apple", elem_id="image-prompt")
                    with gr.Row():
                        grid_height = gr.Number(value=None, precision=0, label="Grid height (tokens)",
                                                info="Emu3 only (any size); empty = the family's own",
                                                elem_id="image-grid-height")
                        grid_width = gr.Number(value=None, precision=0, label="Grid width (tokens)",
                                               elem_id="image-grid-width")
                run = gr.Button("Generate", variant="primary", elem_id="image-run")
            with gr.Column(scale=2):
                decoder = gr.Dropdown(decoder_choices(), value=DEFAULT_DECODER if DEFAULT_DECODER in
                                      decoder_choices() else "ar", label="Decoder", elem_id="image-decoder")
                options = gr.Textbox(value=default_options(decoder.value), label="Decoder options",
                                     info="key=value, separated by commas", elem_id="image-options")
                with gr.Accordion("Sampling", open=False):
                    guidance = gr.Slider(1.0, 8.0, value=defaults["guidance_scale"], step=0.25,
                                         label="Guidance scale (1 = none)")
                    temperature = gr.Slider(0.05, 2.0, value=defaults["temperature"], step=0.05,
                                            label="Temperature")
                    seed = gr.Number(value=0, precision=0, label="Seed (empty = random)")
        stats = gr.HTML(label="Stats", elem_id="image-stats")
        with gr.Row():
            with gr.Column():
                gr.Markdown("**chosen decoder**")
                with gr.Row():
                    picture = gr.Image(label="Image", type="pil", elem_id="image-output", buttons=["download"])
                    steps = gr.Image(label="Decided at forward", type="pil", elem_id="image-steps")
            with gr.Column(visible=False) as ar_column:
                gr.Markdown("**ar baseline**")
                with gr.Row():
                    ar_picture = gr.Image(label="Image (ar)", type="pil", elem_id="image-ar-output")
                    ar_steps = gr.Image(label="Decided at forward (ar)", type="pil", elem_id="image-ar-steps")

        decoder.change(default_options, decoder, options, queue=False, api_visibility="private")
        compare.change(lambda on: gr.Column(visible=bool(on)), compare, ar_column, queue=False,
                       api_visibility="private")
        run.click(guarded("image generation", generate, blank=(None, None, None, None, "")),
                  [label, decoder, options, guidance, temperature, seed, compare, model_folder, prompt, grid_height,
                   grid_width],
                  [picture, steps, ar_picture, ar_steps, stats], api_name="generate_image")
    return demo
