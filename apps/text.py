"""Text tab: a prompt decoded by any text decoder in the registry, streamed, the text coloured by the
chunk each forward accepted, with a stats table and an optional race against the `ar` baseline.

    import apps.text
    apps.text.build_demo().launch()          # loads text.load() (embedded SmolLM2) on first use

A "Model folder" loads a user's folder through text.load(folder) (once per folder): a causal LM, or an
image-text-to-text VLM (text.vlm_chat.VLMChat) that answers about the given image.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr

import suite

from suite.params import DEFAULT_MAX_NEW_TOKENS
from suite.runtime.options import decoders_used, format_options, parse_options, ui_options

from .errors import guarded
from .folders import folder_field
from .inputs import image_input, positive_int, require_text, sampling_args
from .pipelines import FolderPipelines, Shared
from .summary import stats_row, summary_html
from .timing import TimedIterator, race, throttled

TITLE = "Text"
# the registry's decoders that work on one token sequence (vision/speech decoders live there too)
UI_DEFAULTS = {"speculative": {"draft": "self:8"}}     # what a decoder needs to run in the app
EXAMPLES = [
    ["Rewrite this function with type hints and a docstring:\n\ndef area(width, height):\n"
     "    return width * height", "ngram"],
    ["What is the capital of France? Answer in one sentence.", "lookahead"],
    ["Write a haiku about parallel computing.", "speculative"],
    ["List the first ten prime numbers.", "jacobi"],
]
SCHEMA_EXAMPLE = """{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "role": {"enum": ["engineer", "manager", "designer"]},
    "skills": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["name", "age", "role", "skills"]
}"""
SCHEMA_PROMPT = ("Extract the person as JSON (name, age, role, skills).\n"
                 "Text: Maria Lopez is a 34-year-old engineer who knows Python, SQL and Docker.")
UPDATE_EVERY_S = 0.05     # at most ~20 UI updates a second per request; the last state always goes out


def load_pipeline():
    """The tab's model: the embedded SmolLM2-135M-Instruct (offline)."""
    import text
    return text.load(progress=False)


def load_folder(folder: str):
    """A user's model folder, as `python -m text --model FOLDER` loads it."""
    import text
    return text.load(folder, progress=False)


def vlm_families() -> str:
    from suite.models.vlm import FAMILIES
    return ", ".join(FAMILIES)


def known_families() -> str:
    return f"any transformers causal LM, a vision-language model ({vlm_families()}), or a DiffusionGemma folder"


def decoder_choices() -> list[str]:
    return suite.list_decoders("text")


def default_decoder() -> str:
    """The text CLI's and API's default (text.generator.DEFAULT_DECODER: auto), where registered."""
    from text.generator import DEFAULT_DECODER
    return DEFAULT_DECODER if DEFAULT_DECODER in decoder_choices() else "ar"


def default_options(name: str) -> str:
    if name not in suite.DECODERS:
        return ""
    return format_options(ui_options(name, UI_DEFAULTS.get(name)))


# -- one decode of one request: its stream and the chunks each forward accepted ----------------------

@dataclass
class Chunk:
    text: str
    tokens: int       # tokens committed
    forwards: int     # forwards it took (1, unless a forward committed text that ended mid-character)
    first: int        # index of its (first) forward, 1-based


class TextRun:
    """Per-request state of one decoder's stream (never shared between requests)."""

    def __init__(self, decoder: str, stream):
        self.decoder, self.stream = decoder, stream
        self.timer = TimedIterator(stream)
        self.chunks: list[Chunk] = []
        self._tokens = self._forwards = 0

    @property
    def done(self) -> bool:
        return self.timer.done

    def advance(self) -> None:
        text = self.timer.step()
        if text is None:
            return
        tokens, forwards = len(self.stream.token_ids), self.stream.stats.num_forwards
        new_tokens, new_forwards = tokens - self._tokens, forwards - self._forwards
        if new_tokens == 0 and self.chunks:      # the final flush of held-back characters
            self.chunks[-1].text += text
        else:
            self.chunks.append(Chunk(text, new_tokens, new_forwards, self._forwards + 1))
        self._tokens, self._forwards = tokens, forwards

    def stats(self) -> dict:
        return stats_row(self.decoder, self.stream.stats, self.timer.elapsed, self.done)


class ChatStream:
    """A VLM's answer (text.vlm_chat.VLMChat decodes it whole, on the first step) replayed like a
    TextStream: one chunk per forward, of the tokens that forward committed."""

    def __init__(self, chat, prompt: str, image, decoder: str, **kwargs):
        self._answer = lambda: chat.generate(prompt, image=image, decoder=decoder, **kwargs)
        self._chat = chat
        self.token_ids: list[int] = []
        self.text, self.finish_reason = "", None
        self.stats = suite.DecodeStats()        # live: one forward per replayed step

    def __iter__(self):
        res = self._answer()
        tokenizer = self._chat.vlm.tokenizer
        for forwards, committed in enumerate(res.stats.accepted_lengths, 1):
            self.token_ids += res.tokens[len(self.token_ids):len(self.token_ids) + committed[0]]
            self.stats.num_forwards, self.stats.num_new_tokens = forwards, len(self.token_ids)
            full = tokenizer.decode(self.token_ids, skip_special_tokens=True)
            chunk, self.text = full[len(self.text):], full
            yield chunk
        self.token_ids, self.text, self.stats = list(res.tokens), res.text, res.stats
        self.finish_reason = "eos" if res.tokens and res.tokens[-1] in self._chat.vlm.eos else "length"


def is_vlm(gen) -> bool:
    from text.vlm_chat import VLMChat
    return isinstance(gen, VLMChat)


def text_run(gen, decoder: str, prompt: str, image, args: dict, options: dict) -> TextRun:
    """One decoder's run: a causal LM streams the prompt's answer; a VLM answers about the image."""
    if not is_vlm(gen):
        if image is not None:
            raise ValueError(f"this model reads no images; give a vision-language model folder ({vlm_families()}), "
                             "or remove the image")
        return TextRun(decoder, gen.stream(prompt, decoder=decoder, **args, **options))
    family = gen.vlm.family
    if image is None:
        raise ValueError(f"{family} is a vision-language model: add an image to ask about")
    if decoder not in gen.decoders:
        raise ValueError(f"decoder {decoder!r} does not run on {family}; use one of: {', '.join(gen.decoders)}")
    args = {k: v for k, v in args.items() if k != "chat"}      # the family's own prompt format (VLMChat.prompt)
    return TextRun(decoder, ChatStream(gen, prompt, image, decoder, **args, **options))


# -- pictures -----------------------------------------------------------------------------------------

SINGLE_COLOURS = ("#e9ecef", "#f8f9fa")     # 1 token per forward: alternating greys
MULTI_COLOURS = ((2, "#c3f0d2", "#111"), (3, "#8fdeae", "#111"), (5, "#41c07e", "#111"),
                 (8, "#178a52", "#fff"))     # (at least n tokens, background, text)


def chunk_colours(chunk: Chunk, index: int) -> tuple[str, str]:
    if chunk.tokens <= 1:
        return SINGLE_COLOURS[index % 2], "#111"
    background, ink = MULTI_COLOURS[0][1:]
    for least, bg, fg in MULTI_COLOURS:
        if chunk.tokens >= least:
            background, ink = bg, fg
    return background, ink


LEGEND = ("<div style='font-size:0.85em;margin-bottom:6px'>each span = the tokens one forward accepted: "
          + "".join(f"<span style='background:{bg};color:{fg};padding:0 6px;margin:0 2px;border-radius:3px'>"
                    f"{label}</span>"
                    for label, bg, fg in (("1", SINGLE_COLOURS[0], "#111"), ("2", MULTI_COLOURS[0][1], "#111"),
                                          ("3-4", MULTI_COLOURS[1][1], "#111"), ("5-7", MULTI_COLOURS[2][1], "#111"),
                                          ("8+", MULTI_COLOURS[3][1], "#fff")))
          + " tokens</div>")


def chunks_html(run: TextRun | None) -> str:
    if run is None:
        return ""
    spans = []
    for i, c in enumerate(run.chunks):
        bg, fg = chunk_colours(c, i)
        where = f"forward {c.first}" if c.forwards <= 1 else f"forwards {c.first}-{c.first + c.forwards - 1}"
        spans.append(f"<span class='ps-chunk' data-tokens='{c.tokens}' title='{where}: {c.tokens} token(s)' "
                     f"style='background:{bg};color:{fg};border-radius:3px;padding:1px 0'>"
                     f"{html.escape(c.text)}</span>")
    state = "done" if run.done else "running"
    return (f"<div class='ps-chunks' data-decoder='{run.decoder}' data-state='{state}'>{LEGEND}"
            f"<div style='white-space:pre-wrap;font-family:ui-monospace,monospace;line-height:1.7'>"
            f"{''.join(spans)}</div></div>")


def stop_note(run: TextRun, max_new_tokens: int, context: int | None) -> str:
    """Why a finished run stopped short of max new tokens without an end token: the context was full."""
    stream = run.stream
    if not run.done or stream.finish_reason == "eos" or len(stream.token_ids) >= max_new_tokens:
        return ""
    limit = f" ({context} tokens)" if context else ""
    return (f"{run.decoder} stopped after {len(stream.token_ids)} of {max_new_tokens} new tokens: the prompt and "
            f"the answer filled the model's context{limit}; shorten the prompt for a longer answer.")


def stats_html(runs: list[TextRun], sampled: bool, max_new_tokens: int, context: int | None) -> str:
    chosen = runs[-1]
    same = None
    if len(runs) == 2 and all(r.done for r in runs):
        same = (runs[0].stream.token_ids == chosen.stream.token_ids, "tokens", sampled)
    used = decoders_used(chosen.stream.stats)                 # auto: which decoders it ran
    note = " ".join(n for n in [stop_note(r, max_new_tokens, context) for r in runs] + [used and f"{used}."] if n)
    return summary_html([r.stats() for r in runs], "text", chosen.decoder, same, note)


# -- the app ------------------------------------------------------------------------------------------

def build_demo(pipeline=None) -> gr.Blocks:
    """The Text tab. `pipeline` is a `text.TextGenerator`; None loads the embedded model on first use
    (once, shared by all requests); a model folder loads its own (once per folder)."""
    pipelines = FolderPipelines(Shared(pipeline, load_pipeline), load_folder, known_families)

    def start(prompt, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed, compare,
              model_folder="", image=None, json_schema=""):
        """The request's runs (the decoder's, and ar's first with compare) and the view of them."""
        if decoder not in decoder_choices():
            raise ValueError(f"unknown decoder {decoder!r}: pick one of {', '.join(decoder_choices())}")
        require_text("prompt", prompt, "type some text into the prompt box")
        args = dict(max_new_tokens=positive_int("max new tokens", max_new_tokens), chat=bool(chat),
                    **sampling_args(temperature, top_k, top_p, seed))
        if (json_schema or "").strip():
            args["json_schema"] = json_schema       # checked by text.TextGenerator.grammar, before decoding
        gen = pipelines.get(model_folder)
        if "json_schema" in args and is_vlm(gen):
            raise ValueError("the JSON schema constrains causal LMs; this folder holds a vision-language model: "
                             "use Generate without a schema, or a causal LM folder")
        runs = [text_run(gen, decoder, prompt, image, args, parse_options(decoder, options))]
        base = (getattr(gen, "decoders", None) or ["ar"])[0]    # ar; a DiffusionGemma folder: its own sampler
        if compare and decoder != base:
            runs.insert(0, text_run(gen, base, prompt, image, args, {}))
        chosen, baseline = runs[-1], (runs[0] if len(runs) == 2 else None)

        def view():
            return (chosen.stream.text, chunks_html(chosen), baseline.stream.text if baseline else "",
                    chunks_html(baseline), stats_html(runs, args["temperature"] > 0, args["max_new_tokens"],
                                                      getattr(gen, "max_length", None)))
        return runs, view

    def generate(prompt, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed, compare,
                 model_folder="", image=None):
        runs, view = start(prompt, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed, compare,
                           model_folder, image)
        yield view()
        for _ in throttled(race(runs), UPDATE_EVERY_S):
            yield view()

    def generate_json(prompt, json_schema, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed,
                      compare, model_folder=""):
        """Structured output: the answer constrained to JSON valid under `json_schema` (every decoder; the
        grammar's forced tokens committed in parallel), then the parsed object (null where the budget
        ended inside the structure)."""
        require_text("JSON schema", json_schema, "paste a JSON schema, e.g. the example")
        runs, view = start(prompt, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed, compare,
                           model_folder, None, json_schema)
        yield (*view(), "", None)
        for _ in throttled(race(runs), UPDATE_EVERY_S):
            yield (*view(), "", None)
        stream = runs[-1].stream
        yield (*view(), validity_markdown(stream),
               stream.json if stream.parse_error is None else {"parse_error": stream.parse_error})

    def validity_markdown(stream) -> str:
        """The answer's check against the schema (suite.constraint.Grammar.validate), in one line or two."""
        if stream.parse_error is not None:
            line = f"**Not complete JSON**: {stream.parse_error}"
        elif stream.valid:
            line = "**Valid** under the schema (checked with jsonschema, formats asserted)"
        else:
            line = "**Not valid** under the schema: " + "; ".join(stream.validation_errors)
        if stream.relaxed:
            line += f"  \nNot enforced while generating: {', '.join(stream.relaxed)}"
        return line

    with gr.Blocks(title="parasuite: text") as demo:
        gr.Markdown("Parallel decoding of **SmolLM2-135M-Instruct**: each forward can accept several tokens. "
                    "Pick a decoder, turn on *compare with AR* to race the one-token-per-forward baseline.")
        with gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Textbox(label="Prompt", lines=4, value=EXAMPLES[0][0], elem_id="text-prompt")
                with gr.Row():
                    chat = gr.Checkbox(value=True, label="Chat template", elem_id="text-chat")
                    compare = gr.Checkbox(value=False, label="Compare with AR", elem_id="text-compare")
                with gr.Accordion("Your own model", open=False):
                    model_folder = folder_field("text-model-folder", "the embedded SmolLM2-135M-Instruct",
                                                "causal LM or vision-language model")
                    image = image_input(label="Image (vision-language models)", type="pil", height=200,
                                        elem_id="text-image")
                run = gr.Button("Generate", variant="primary", elem_id="text-run")
            with gr.Column(scale=2):
                decoder = gr.Dropdown(decoder_choices(), value=default_decoder(), label="Decoder",
                                      elem_id="text-decoder")
                options = gr.Textbox(value=default_options(default_decoder()), label="Decoder options",
                                     info="key=value, separated by commas", elem_id="text-options")
                max_new_tokens = gr.Slider(1, 512, value=DEFAULT_MAX_NEW_TOKENS, step=1, label="Max new tokens",
                                           elem_id="text-max-new-tokens")
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                    top_k = gr.Number(value=0, precision=0, label="Top-k (0 = off)")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p (1 = off)")
                    seed = gr.Number(value=0, precision=0, label="Seed (empty = random)")
        stats = gr.HTML(label="Stats", elem_id="text-stats")
        with gr.Row():
            with gr.Column():
                output = gr.Textbox(label="Output", lines=6, interactive=False, elem_id="text-output",
                                    buttons=["copy"])
                output_chunks = gr.HTML(label="Output by forward", elem_id="text-chunks")
            with gr.Column(visible=False) as ar_column:
                ar_output = gr.Textbox(label="AR baseline output", lines=6, interactive=False,
                                       elem_id="text-ar-output")
                ar_chunks = gr.HTML(label="AR baseline by forward", elem_id="text-ar-chunks")
        with gr.Accordion("Structured output (JSON schema)", open=False):
            json_schema = gr.Textbox(value=SCHEMA_EXAMPLE, lines=10, label="JSON schema", elem_id="text-json-schema",
                                     info="the answer is JSON valid under this schema; forced tokens "
                                          "(keys, brackets, enum tails) are committed in parallel")
            with gr.Row():
                schema_example = gr.Button("Schema example", elem_id="text-json-example")
                run_json = gr.Button("Run with schema", variant="primary", elem_id="text-json-run")
            validity = gr.Markdown(label="Validity", show_label=False, elem_id="text-json-valid")
            parsed = gr.JSON(label="Parsed JSON", elem_id="text-json")
        gr.Examples(EXAMPLES, inputs=[prompt, decoder])

        decoder.change(default_options, decoder, options, queue=False, api_visibility="private")
        compare.change(lambda on: gr.Column(visible=bool(on)), compare, ar_column, queue=False,
                       api_visibility="private")
        inputs = [prompt, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed, compare,
                  model_folder, image]
        outputs = [output, output_chunks, ar_output, ar_chunks, stats]
        run.click(guarded("text generation", generate, blank=("", "", "", "", "")), inputs, outputs,
                  api_name="generate")
        schema_example.click(lambda: (SCHEMA_PROMPT, SCHEMA_EXAMPLE), None, [prompt, json_schema], queue=False,
                             api_visibility="private")
        run_json.click(guarded("structured generation", generate_json, blank=("", "", "", "", "", "", None)),
                       [prompt, json_schema, chat, decoder, options, max_new_tokens, temperature, top_k, top_p, seed,
                        compare, model_folder], outputs + [validity, parsed], api_name="generate_json")
    return demo
