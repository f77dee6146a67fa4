"""Grounding tab: an image and a referring expression; the boxes our grounding model finds, decoded
slot by slot (ar), a whole box per forward (parallel_box) or parallel with validated AR fallback
(hybrid); axis-aligned or oriented boxes.

    import apps.grounding
    apps.grounding.build_demo().launch()      # loads vision.load_grounding_pipeline() (embedded weights)

A "Model folder" (Florence-2, PaliGemma, Kosmos-2) loads through vision.load_grounding_pipeline(folder).
"""
from __future__ import annotations

import html
import math

import gradio as gr

import suite
from vision.grounding.pipeline import DEFAULT_DECODER  # the CLI's and the API's default too
from suite.runtime.options import format_options, parse_options, ui_options

from .errors import guarded
from .folders import folder_field
from .inputs import image_input, require_text, with_folder_decoders
from .pictures import font
from .pipelines import FolderPipelines, Shared
from .summary import stats_row, summary_html

TITLE = "Grounding"
TASKS = {"axis-aligned": "aabb", "oriented": "obb"}
FORWARDS_NOTE = ("forwards: decoder passes for this query (the MobileNetV2 encoder runs once more); "
                 "tokens: box slots and end tokens; wall time: letterbox, encoder and decoding")
COLOURS = ((200, 0, 150), (0, 110, 200), (210, 100, 0), (0, 140, 60))     # dark enough for white numbers
EXAMPLES = {"aabb": (17, "the ring left of the blue square"),       # held-out scenes, one per task
            "obb": (3, "the ellipse")}
EXAMPLE_SCENE, EXAMPLE_QUERY = EXAMPLES["aabb"]


def load_pipeline():
    import vision
    grd = vision.load_grounding_pipeline()
    grd(example_scene(), EXAMPLE_QUERY, decoder="ar")               # warm up the encoder once
    return grd


def load_folder(folder: str):
    """A user's model folder, as `python -m vision.ground --model FOLDER` loads it."""
    import vision
    return vision.load_grounding_pipeline(folder)


def known_families() -> str:
    from vision.hf_grounding import FAMILIES
    return f"{', '.join(FAMILIES)} (saved with its processor), or a grounding model of ours"


def example_scene(index: int = EXAMPLE_SCENE, task: str = "aabb"):
    """A held-out generated scene (numpy RGB)."""
    from vision.grounding import data
    return data.scene("test", index, task).image


def example(task: str):
    """(PIL image, query) of the task's example: rotated shapes for oriented boxes."""
    from PIL import Image
    index, query = EXAMPLES[task]
    return Image.fromarray(example_scene(index, task)), query


def decoder_choices() -> list[str]:
    from vision.grounding.pipeline import DECODERS
    return with_folder_decoders(DECODERS)


def default_options(name: str, pipeline=None, task: str = "aabb") -> str:
    """The decoder's options as text; hybrid's confidence floor is the model's per-task default."""
    if name not in suite.DECODERS:
        return ""
    floors = getattr(getattr(pipeline, "model", None), "cfg", {}).get("hybrid_confidence_floor", {})
    overrides = {"confidence_floor": floors[task]} if name == "hybrid" and task in floors else None
    return format_options(ui_options(name, overrides))


def annotated(image, result, scale: int = 1):
    """The image (enlarged `scale` times, nearest) with each box outlined and numbered."""
    from PIL import Image, ImageDraw
    img = image.convert("RGB")
    img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    d, f = ImageDraw.Draw(img), font(18)
    for k, poly in enumerate(result.polygons()):
        colour = COLOURS[k % len(COLOURS)]
        d.polygon([(float(x) * scale, float(y) * scale) for x, y in poly], outline=colour, width=max(3, scale))
        label = str(k + 1)       # white on the box's colour, above its top-left corner
        x = min(float(p[0]) for p in poly) * scale
        y = max(min(float(p[1]) for p in poly) * scale - 24, 0)
        w = d.textlength(label, font=f)
        d.rectangle([x, y, x + w + 10, y + 23], fill=colour)
        d.text((x + 5, y + 1), label, fill="white", font=f)
    return img


def boxes_html(result) -> str:
    rows = []
    for k, (box, score) in enumerate(zip(result.boxes, result.scores)):
        angle = "" if result.angles is None else f"<td>{math.degrees(result.angles[k]):.1f}</td>"
        score = "–" if score is None else f"{score:.2f}"     # a transformers family gives no box scores
        rows.append(f"<tr class='ps-box'><td>{k + 1}</td><td>{', '.join(f'{v:.1f}' for v in box)}</td>{angle}"
                    f"<td>{score}</td></tr>")
    head = "x0, y0, x1, y1" if result.angles is None else "cx, cy, w, h"
    angle_head = "" if result.angles is None else "<th>angle (deg)</th>"
    answer = "no match" if result.no_match else f"{len(result.boxes)} box(es)"
    return (f"<div class='ps-boxes' data-count='{len(result.boxes)}'><p>{html.escape(result.query)}: {answer}</p>"
            f"<table style='width:100%'><thead><tr><th>#</th><th>{head} (pixels)</th>{angle_head}<th>score</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def row_of(decoder: str, result) -> dict:
    s = result.stats
    stats = suite.DecodeStats(num_forwards=s.row_forwards, num_new_tokens=len(result.tokens))
    return stats_row(decoder, stats, s.wall_time_s, True)


def build_demo(pipeline=None) -> gr.Blocks:
    """The Grounding tab. `pipeline` is vision.load_grounding_pipeline(); None loads it on first use; a
    model folder loads its own (once per folder)."""
    shared = Shared(pipeline, load_pipeline)
    pipelines = FolderPipelines(shared, load_folder, known_families)

    def ground(image, query, decoder, task_label, options, compare, model_folder=""):
        if decoder not in decoder_choices():
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(decoder_choices())}")
        if image is None:
            raise ValueError("no image: upload one (PNG, JPEG) or keep the example scene")
        require_text("query", query, "say what to find, e.g. 'the red circle' or 'the face'")
        task = TASKS.get(task_label, "aabb")
        grd = pipelines.get(model_folder)
        res = grd(image, query, decoder=decoder, task=task, **parse_options(decoder, options))
        rows, same = [row_of(decoder, res)], None
        if compare and decoder != "ar":
            ar = grd(image, query, decoder="ar", task=task)
            rows.insert(0, row_of("ar", ar))
            same = (list(ar.tokens) == list(res.tokens), "boxes", False)
        scale = max(1, 512 // max(image.width, image.height))
        yield (annotated(image, res, scale), boxes_html(res),
               summary_html(rows, "grounding", decoder, same, FORWARDS_NOTE))

    from PIL import Image
    with gr.Blocks(title="parasuite: grounding") as demo:
        gr.Markdown("Box grounding with our model (frozen ImageNet MobileNetV2 + a small GPT-2 decoder): "
                    "`parallel_box` decodes a whole box in one forward, `hybrid` checks each box and re-decodes "
                    "a failing one like AR (keeping the slots AR agrees with), `ar` is the one-slot-per-forward baseline.")
        with gr.Row():
            with gr.Column(scale=2):
                # no value here: the API marks the image required; the page shows the example on load
                image = image_input(type="pil", label="Image", elem_id="grounding-image", height=320)
                query = gr.Textbox(value=EXAMPLE_QUERY, label="Query", elem_id="grounding-query",
                                   info="e.g. the small square, the star left of the blue circle, the face, the word cat")
            with gr.Column(scale=2):
                decoder = gr.Dropdown(decoder_choices(), value=DEFAULT_DECODER, label="Decoder", elem_id="grounding-decoder")
                task = gr.Radio(list(TASKS), value="axis-aligned", label="Boxes", elem_id="grounding-task")
                options = gr.Textbox(value=default_options(DEFAULT_DECODER, pipeline), label="Decoder options",
                                     info="key=value, separated by commas", elem_id="grounding-options")
                compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="grounding-compare")
                model_folder = folder_field("grounding-model-folder", "our grounding model",
                                            "Florence-2, PaliGemma or Kosmos-2")
                run = gr.Button("Ground", variant="primary", elem_id="grounding-run")
        stats = gr.HTML(label="Stats", elem_id="grounding-stats")
        with gr.Row():
            out = gr.Image(label="Boxes", type="pil", elem_id="grounding-output", height=512)
            boxes = gr.HTML(label="Box list", elem_id="grounding-boxes")
        def task_changed(d, t, img, q):      # the decoder's options for the task, and its own example
            task_key = TASKS.get(t, "aabb")      # in place of the other task's (a person's own image stays)
            # the other task's example query still shown: its example (the image comes back re-encoded,
            # so the query, not the pixels, tells)
            is_example = img is None or any(q == EXAMPLES[k][1] for k in TASKS.values() if k != task_key)
            new = example(task_key) if is_example else (gr.update(), gr.update())
            return (default_options(d, shared.get(), task_key), *new)

        decoder.change(lambda d, t: default_options(d, shared.get(), TASKS.get(t, "aabb")), [decoder, task], options,
                       queue=False, api_visibility="private")
        task.change(task_changed, [decoder, task, image, query], [options, image, query], queue=False,
                    api_visibility="private")
        demo.load(lambda: Image.fromarray(example_scene()), None, image, queue=False, api_visibility="private")
        run.click(guarded("grounding", ground, blank=(None, "", "")),
                  [image, query, decoder, task, options, compare, model_folder], [out, boxes, stats], api_name="ground")
    return demo
