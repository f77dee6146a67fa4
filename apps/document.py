"""Document tab: an image or PDF read into lines (box + text) by our OCR model with any OCR decoder;
each page is shown with its lines boxed and their text, page by page as they are read.

    import apps.document
    apps.document.build_demo().launch()      # loads document.load_ocr() (embedded weights)

A "Model folder" (a page-reading VLM: GOT-OCR2, Qwen2-VL, Florence-2) reads each page whole instead,
loaded once per folder as `python -m document --model FOLDER` loads it (document.hf_reader.load_reader).
"""
from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

import suite
from document.ocr import DECODER_DEFAULTS
from suite.registry import effective_options
from document.reader import DEFAULT_DECODER  # python -m document's and document.read's default too
from suite.runtime.options import format_options, parse_options, ui_options

from .errors import guarded
from .folders import folder_field
from .inputs import with_folder_decoders
from .pipelines import FolderPipelines, Shared
from .summary import stats_row, summary_html
from .timing import TimedIterator, race, throttled

TITLE = "Document"
# the registry's decoders that read a line image into text (text/vision/speech ones live there too)
UI_DEFAULTS = DECODER_DEFAULTS       # the registry's one table (suite.registry.DEFAULTS): what the CLI and API run
FILE_TYPES = [".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".pdf"]
FORWARDS_NOTE = ("forwards: each line's own decode steps, summed over lines (the lines of a page are read "
                 "as one batch, so the model runs fewer batched passes); wall time includes finding the lines")
BOX_COLOURS = ((0, 110, 220), (230, 80, 0))       # alternate lines, so neighbours stay apart


def load_pipeline():
    """The embedded OCR, warmed up: the line detector loads once here, not inside the first request
    (where it would be counted against whichever decoder ran first)."""
    import document
    from document.reader import read
    from PIL import Image
    ocr = document.load_ocr()
    read(Image.new("RGB", (64, 64), "white"), ocr=ocr, decoder="ar")
    return ocr


def load_folder(folder: str):
    """A page-reading VLM folder, as `python -m document --model FOLDER` loads it."""
    from document.hf_reader import load_reader
    return load_reader(folder)


def known_families() -> str:
    from document.hf_reader import FAMILIES
    return f"{', '.join(FAMILIES)} (saved with its processor)"


def decoder_choices() -> list[str]:
    from document.ocr import DECODERS
    return with_folder_decoders(DECODERS)


def default_options(name: str) -> str:
    return format_options(ui_options(name, UI_DEFAULTS.get(name))) if name in suite.DECODERS else ""


def example_page() -> str | None:
    """scikit-image's scanned page (a real scan that ships with the package), when installed."""
    try:
        import skimage
    except ImportError:
        return None
    path = Path(skimage.__file__).parent / "data" / "page.png"
    return str(path) if path.is_file() else None


def read_pages(ocr, path: str, decoder: str, options: dict):
    """Pages one at a time, so the UI updates after each page of a PDF; `ocr` is our OCR or a
    page-reading VLM (document.hf_reader.HFPageReader), which reads each page whole."""
    from document.hf_reader import HFPageReader
    from document.reader import iter_pages
    reader = {"model": ocr} if isinstance(ocr, HFPageReader) else {"ocr": ocr}
    yield from iter_pages(path, decoder=decoder, **reader, **options)     # a PDF's text layer where it has one


class DocumentRun:
    """Per-request state of reading one file with one decoder."""

    def __init__(self, decoder: str, pages):
        self.decoder = decoder
        self.timer = TimedIterator(pages)
        self.pages = []
        self.stats = suite.DecodeStats()

    @property
    def done(self) -> bool:
        return self.timer.done

    def advance(self) -> None:
        page = self.timer.step()
        if page is None:
            return
        self.pages.append(page)
        s = page.stats
        if s is not None:
            self.stats.num_forwards += s.row_forwards     # each line's own decode steps, summed
            self.stats.num_new_tokens += s.num_new_tokens

    def row(self) -> dict:
        return stats_row(self.decoder, self.stats, self.timer.elapsed, self.done)

    def text(self) -> str:
        return "\n\n".join(p.text for p in self.pages)


def boxed(page):
    """The page with each line's box drawn and numbered (the text is listed beside it)."""
    from PIL import ImageDraw
    img = page.picture().convert("RGB").copy()
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(page.lines):
        colour = BOX_COLOURS[i % 2]
        draw.rectangle(line.box, outline=colour, width=2)
        draw.text((line.box[0], max(line.box[1] - 11, 0)), str(i + 1), fill=colour)
    return img


def check_html(run: DocumentRun) -> str:
    """The lines to check, least confident first, as the CLI lists them: those whose calibrated
    confidence (document/confidence.py) is below the weights' flag threshold."""
    from document.__main__ import CHECK_LIST
    items = sorted((line.confidence, p.index + 1, i + 1, line.text) for p in run.pages
                   for i, line in enumerate(p.lines) if line.check)
    if not items:
        return ""
    more = f"; the {CHECK_LIST} least confident shown" if len(items) > CHECK_LIST else ""
    rows = "".join(f"<li>p.{page} line {n} ({conf:.2f}): <code>{html.escape(text)}</code></li>"
                   for conf, page, n, text in items[:CHECK_LIST])
    return (f"<div class='ps-check'><b>Check these</b> ({len(items)} lines below the confidence threshold{more}):"
            f"<ul>{rows}</ul></div>")


def lines_html(run: DocumentRun | None) -> str:
    if run is None:
        return ""
    rows = []
    for p in run.pages:
        for i, line in enumerate(p.lines):
            mark = " ps-check-line' style='background:rgba(255,190,0,0.18)" if line.check else ""
            rows.append(f"<tr class='ps-line{mark}'><td>{p.index + 1}</td><td>{i + 1}</td>"
                        f"<td style='font-family:ui-monospace,monospace'>{html.escape(line.text)}</td>"
                        f"<td>{line.confidence:.2f}{' check' if line.check else ''}"
                        f"{' (text layer)' if getattr(line, 'source', 'ocr') == 'text_layer' else ''}</td></tr>")
    state = "done" if run.done else "running"
    return (f"<div class='ps-lines' data-decoder='{run.decoder}' data-state='{state}'>{check_html(run)}"
            "<table style='width:100%'>"
            "<thead><tr><th>page</th><th>line</th><th>text</th><th>confidence</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def build_demo(pipeline=None) -> gr.Blocks:
    """The Document tab. `pipeline` is a `document` OCR (document.load_ocr()); None loads the
    embedded one on first use (once, shared by all requests); a model folder loads its own (once per folder)."""
    pipelines = FolderPipelines(Shared(pipeline, load_pipeline), load_folder, known_families)

    def read(path, decoder, options, compare, model_folder=""):
        if decoder not in decoder_choices():
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(decoder_choices())}")
        if not path:
            raise ValueError("no file: upload a page image (PNG, JPEG, TIFF) or a PDF")
        ocr = pipelines.get(model_folder)
        typed = parse_options(decoder, options)
        ran = effective_options(decoder, "document", typed) if decoder in suite.REGISTRY else None
        runs = [DocumentRun(decoder, read_pages(ocr, path, decoder, typed))]
        if compare and decoder != "ar":
            runs.insert(0, DocumentRun("ar", read_pages(ocr, path, "ar", {})))
        chosen, baseline = runs[-1], (runs[0] if len(runs) == 2 else None)

        def view():
            same = (baseline.text() == chosen.text(), "text", False) if baseline and baseline.done and chosen.done \
                else None
            table = summary_html([r.row() for r in runs], "document", decoder, same, FORWARDS_NOTE, options=ran)
            return ([boxed(p) for p in chosen.pages], chosen.text(), lines_html(chosen),
                    baseline.text() if baseline else "", table)

        yield view()
        for _ in throttled(race(runs), 0.05):
            yield view()

    with gr.Blocks(title="parasuite: document") as demo:
        gr.Markdown("Page reading with our OCR model: lines are found on the page, each line image is read "
                    "by the decoder (block diffusion unmasks several characters per forward, s2d2 verifies its drafts, "
                    "ctc_speculative drafts each line from the model's CTC head).")
        with gr.Row():
            with gr.Column(scale=2):
                # no value here: the API marks the file required; the page shows the example on load
                upload = gr.File(label="Page image or PDF", file_types=FILE_TYPES, type="filepath",
                                 elem_id="document-file")
                compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="document-compare")
                model_folder = folder_field("document-model-folder", "our OCR model",
                                            "GOT-OCR2, Qwen2-VL or Florence-2", "it reads each page whole")
                run = gr.Button("Read", variant="primary", elem_id="document-run")
            with gr.Column(scale=2):
                decoder = gr.Dropdown(decoder_choices(), value=DEFAULT_DECODER if DEFAULT_DECODER in
                                      decoder_choices() else "ar", label="Decoder", elem_id="document-decoder")
                options = gr.Textbox(value=default_options(decoder.value), label="Decoder options",
                                     info="key=value, separated by commas", elem_id="document-options")
        stats = gr.HTML(label="Stats", elem_id="document-stats")
        with gr.Row():
            pages = gr.Gallery(label="Lines found and read", columns=1, height=640, object_fit="contain",
                               elem_id="document-pages")
            with gr.Column():
                text = gr.Textbox(label="Text", lines=12, interactive=False, elem_id="document-text",
                                  buttons=["copy"])
                ar_text = gr.Textbox(label="Text (ar baseline)", lines=6, interactive=False,
                                     visible=False, elem_id="document-ar-text")
        lines = gr.HTML(label="Lines", elem_id="document-lines")

        demo.load(example_page, None, upload, queue=False, api_visibility="private")
        decoder.change(default_options, decoder, options, queue=False, api_visibility="private")
        compare.change(lambda on: gr.Textbox(visible=bool(on)), compare, ar_text, queue=False,
                       api_visibility="private")
        run.click(guarded("page reading", read, blank=(None, "", "", "", ""), hide_paths=lambda path, *_: (path,)),
                  [upload, decoder, options, compare, model_folder],
                  [pages, text, lines, ar_text, stats], api_name="read_document")
    return demo
