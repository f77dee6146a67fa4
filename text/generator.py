"""`text.load()` and `TextGenerator`: prompts in, text out, through the model's `suite.scheduler.Scheduler`
(`suite.prepare`, then the decode loop's steps, shared with concurrent requests)."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

import suite
from suite.params import DEFAULT_MAX_NEW_TOKENS

from .folders import check_folder, load_model, load_tokenizer
from .model import is_gguf, load_embedded, load_gguf, quiet_transformers
from .row_text import RowText, check_stops

EAGLE_WEIGHTS = Path(__file__).parent / "weights" / "eagle"   # the embedded model's draft head
SAM_CORPUS = Path(__file__).parent / "weights" / "sam_corpus" / "corpus.txt"   # sam_decoding's default corpus
DEFAULT_DECODER = "auto"


@dataclass
class TextResult:
    text: str | list[str]                        # str for a str prompt, one per prompt for a list
    token_ids: list[int] | list[list[int]]       # new token ids as generated (a final EOS included)
    stats: suite.DecodeStats                     # for the whole call (the batch together)
    finish_reason: str | list[str] = "length"    # "eos", "stop" (a stop string) or "length", per prompt
    json: Any = None             # json_schema=: the parsed object (per prompt for a list; None where the text
                                 # does not parse: the budget ended inside the structure); regex=: the text
    parse_error: str | list[str | None] | None = None   # why `json` is None (per prompt for a list)
    valid: bool | list[bool] | None = None       # the output checked against the schema (Draft 2020-12 unless it
                                                 # declares another, formats asserted) or the regex; None if free
    validation_errors: list[str] | list[list[str]] = field(default_factory=list)   # why it is not valid
    relaxed: tuple = ()          # keywords the grammar did not enforce (validated after: `valid`)


def load(path: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
         dtype: str | torch.dtype | None = None, progress: bool = True, compile: str | None = None,
         engine: str | None = None, step: str | None = None) -> "TextGenerator":
    """The embedded SmolLM2-135M-Instruct (no path), any local transformers causal LM folder
    (config, weights and tokenizer), or a GGUF file (dequantised once into the cache, then run on the
    torch engine: text.model.load_gguf). Never downloads. dtype: float32, bfloat16, or "auto" (bf16 on
    CUDA or where the CPU runs bf16 natively, else fp32); None: $PARASUITE_DTYPE if set, else "auto"
    (native precision; bf16 runs on a fixed step: BENCHMARKS.md, "The fixed step"). See
    suite.models.dtypes, also for what "exact" means in bf16. compile: an inductor setting
    (suite.models.compiled: "default", "freezing", "cpp_wrapper", "max-autotune") for compiled decode steps
    (`TextGenerator.compile`); None: $PARASUITE_COMPILE if set, else eager (the default). engine: what runs a
    GGUF file, "torch" (dequantised once into a float32 folder) or "llama.cpp" (the file as it is, through
    llama-cpp-python: text.llama_cpp_engine); None: llama.cpp where it is installed, else torch. step: "fixed"
    (every decode step the same number of slots over a static cache: suite.models.step; drafts are chains
    there, and lossless decoders give ar's tokens bitwise in bf16 too, and `compile`
    compiles that one step) or "free" (each step as wide as its draft); None: $PARASUITE_STEP if set, else
    "fixed" in bfloat16 (where free widths round differently from `ar`'s one-token steps) and "free" in
    float32 (exact either way; there every slot costs)."""
    from suite.models.dtypes import default_dtype, resolve_dtype

    from .llama_cpp_engine import check_engine, default_engine
    gguf = path is not None and is_gguf(path)
    check_engine(engine, gguf)
    if gguf and (engine or default_engine(path)) == "llama.cpp":
        return _load_llama_cpp(path, device, compile)
    dtype = resolve_dtype(default_dtype("auto") if dtype is None else dtype, device)
    if path is not None and vlm_family(path):          # an image-text-to-text family: text.vlm_chat.VLMChat
        from suite.vlm import load_vlm

        from .vlm_chat import VLMChat
        with quiet_transformers():
            return VLMChat(load_vlm(path, device=device), name=str(path))
    if path is not None and model_type(path) == "diffusion_gemma":    # a block-diffusion LM: text.diffusion_gemma
        from .diffusion_gemma import load_folder
        adapter, tokenizer = load_folder(path, device=device, dtype=dtype)
        return TextGenerator(adapter, tokenizer, name=str(path))
    if path is None:
        model, tokenizer = load_embedded(progress=progress, dtype=dtype)
        name = "SmolLM2-135M-Instruct (embedded)" + ("" if dtype == torch.float32 else f", {str(dtype)[6:]}")
    elif is_gguf(path):
        model, tokenizer = load_gguf(path, progress=progress, dtype=dtype)
        name = str(path)
    else:
        model, tokenizer = _load_folder(path, dtype)
        name = str(path)
    if device is not None:
        model.to(device)
    gen = TextGenerator(model, tokenizer, name=name, draft_folder=EAGLE_WEIGHTS if path is None else None)
    compile = compile if compile is not None else os.environ.get("PARASUITE_COMPILE") or None
    step = step or os.environ.get("PARASUITE_STEP") or ("fixed" if dtype == torch.bfloat16 else "free")
    if step not in ("fixed", "free"):
        raise ValueError(f"step must be 'fixed' or 'free', got {step!r}")
    if step == "fixed":
        gen.fix_step(setting=compile)
    elif compile is not None:
        gen.compile(compile)
    return gen


def _load_llama_cpp(path, device, compile) -> "TextGenerator":
    """A GGUF file on the llama.cpp engine (its own type: dtype does not apply), CPU threads as torch's."""
    from .llama_cpp_engine import load_llama_cpp
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"the llama.cpp engine runs on the CPU here: drop device={device!r}, or pass engine='torch'")
    if compile is not None:
        raise ValueError("compile= compiles torch decode steps: drop it for the llama.cpp engine, or pass engine='torch'")
    adapter, tokenizer = load_llama_cpp(path)
    return TextGenerator(adapter, tokenizer, name=f"{path} (llama.cpp)")


def vlm_family(path) -> str | None:
    """The image-text-to-text family (suite.models.vlm.FAMILIES) of a model folder, else None (a causal LM,
    or no readable config.json: the loader names what is wrong)."""
    from suite.models.vlm import FAMILIES
    family = model_type(path)
    return family if family in FAMILIES else None


def model_type(path) -> str | None:
    """config.json's model_type of a folder (None without a readable one)."""
    from suite.runtime.storage import read_json
    return read_json(Path(path).expanduser() / "config.json", default={}).get("model_type")


def _load_folder(path, dtype):
    from transformers import AutoModelForCausalLM

    folder = check_folder(path)
    tokenizer = load_tokenizer(folder, path)
    return load_model(AutoModelForCausalLM, folder, path, dtype, "a transformers *ForCausalLM model"), tokenizer


class TextGenerator:
    """A causal LM and its tokenizer, decoded with any decoder in `suite.DECODERS`."""

    def __init__(self, model, tokenizer, name: str | None = None, draft_folder: str | os.PathLike | None = None):
        self.model = model.eval()
        self.draft_folder = draft_folder    # the EAGLE head's weights for decoder="eagle" / "auto"
        self._head = None
        self._scheduler = None
        self.adapter = None        # the adapter requests run on (`compile`); None: the model's own (suite.as_adapter)
        self.prefix_cache = None   # suite.prefix_cache.PrefixCache of this model (`use_prefix_cache`), or None
        self._compiler = None      # suite.constraint.Compiler over this tokenizer (json_schema= / regex=)
        self._lock = threading.Lock()
        self.tokenizer = tokenizer
        self.name = name or type(model).__name__
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is not None:
                tokenizer.pad_token = tokenizer.eos_token
            else:   # any id works: padded slots are masked out
                tokenizer.pad_token_id = 0
        adapter = suite.as_adapter(model)
        self.eos_token_ids = adapter.config.eos_token_ids
        self.decoders = adapter.capabilities.only_decoders   # a model only some decoders drive (DiffusionGemma)

    @property
    def max_length(self) -> int | None:
        cfg = self.model.config
        return (getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
                or getattr(cfg, "max_length", None))

    def __repr__(self) -> str:
        return f"TextGenerator({self.name!r})"

    # -- prompts -> token ids ------------------------------------------------------------------

    def rows(self, prompts: str | list[str], chat: bool = False) -> list[list[int]]:
        """The token ids of each prompt, unpadded: a request's rows for `suite.prepare`, which
        checks them (no tokens, longer than the model's context). ValueError on a bad prompt."""
        texts, special = self._texts(prompts, chat)
        return self.tokenizer(texts, add_special_tokens=special)["input_ids"]

    def chat_row(self, turns: list[dict]) -> list[int]:
        """The token ids of a conversation (`turns`: {"role", "content"} dicts, oldest first) through the chat
        template, ready for the assistant's answer. ValueError when the tokenizer has no chat template."""
        return self.tokenizer(self._chat_text(turns), add_special_tokens=False)["input_ids"]

    def encode(self, prompts: str | list[str], chat: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask), both (B, P), left-padded, as transformers' generate takes
        them. ValueError on a bad prompt."""
        texts, special = self._texts(prompts, chat)
        enc = self.tokenizer(texts, add_special_tokens=special, padding=True, return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    def _texts(self, prompts, chat: bool) -> tuple[list[str], bool]:
        """(the text of each prompt, whether the tokenizer adds its special tokens): with chat, each
        prompt as a user turn through the chat template (which holds the special tokens itself)."""
        rows = self._as_list(prompts)
        if not chat:
            return rows, True
        return [self._chat_text([{"role": "user", "content": p}]) for p in rows], False

    def _chat_text(self, turns: list[dict]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {self.name} has no chat template: drop chat=True (--chat)")
        return self.tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)

    @staticmethod
    def _as_list(prompts) -> list[str]:
        if isinstance(prompts, str):
            rows = [prompts]
        elif isinstance(prompts, (list, tuple)) and all(isinstance(p, str) for p in prompts):
            rows = list(prompts)
        else:
            raise ValueError(f"prompt must be a str or a list of str, got {type(prompts).__name__}")
        if not rows:
            raise ValueError("empty list of prompts: pass at least one prompt")
        for i, p in enumerate(rows):
            if not p:
                where = "empty prompt" if isinstance(prompts, str) else f"prompt {i} is empty"
                raise ValueError(f"{where}: pass some text")
        return rows

    # -- token ids -> text ---------------------------------------------------------------------

    def decode(self, token_ids: list[int]) -> str:
        """Text of new tokens; a final EOS is left out, and so is a multi-byte character that a cut
        (max_new_tokens) left incomplete (the tokenizer reads its bytes as U+FFFD)."""
        ids = list(token_ids)
        if ids and ids[-1] in self.eos_token_ids:
            return self.tokenizer.decode(ids[:-1], skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False).rstrip("\ufffd")

    # -- generation ----------------------------------------------------------------------------

    def generate(self, prompt: str | list[str], decoder: str = DEFAULT_DECODER,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, chat: bool = False, json_schema: dict | str | None = None,
                 regex: str | None = None, forced_spans: bool | None = None, constraint: dict | None = None,
                 stop: str | list[str] | None = None, **decoder_options) -> TextResult:
        """Decode one prompt (text is a str) or a batch (text is a list; ragged rows, each advancing
        by its own accepted length and leaving the batch when it finishes). Concurrent calls share
        forwards (`scheduler`).

        Structured output: json_schema (a dict, or its JSON text) or regex constrains every row
        (suite.constraint; every decoder, lossless ones stay lossless w.r.t. the constrained
        distribution); the result's `json` holds the parsed object, `valid` / `validation_errors` its check
        against the schema. constraint: options of suite.constraint.check (backend="auto"|"xgrammar"|
        "llguidance", strict=True for closed objects, approximate=False to refuse a schema with a keyword no
        backend enforces instead of enforcing the rest and listing it in `relaxed`, the default).
        forced_spans: commit the tokens the grammar forces in parallel
        (default: on, except for decoder="ar", the one-token-per-forward baseline). A bad schema or regex
        raises ValueError (suite.constraint.ConstraintError) before any decoding. stop: a string or up to 4
        (text.row_text): a row's text ends before the first one it generates, and the request stops once
        every row has stopped."""
        stops = check_stops(stop)
        grammar = self.grammar(json_schema, regex, **(constraint or {}))
        request = self._submit(prompt, decoder, max_new_tokens, temperature, top_k, top_p, seed, chat,
                               decoder_options, stream=bool(stops), grammar=grammar, forced_spans=forced_spans)
        rows = [RowText(self.decode, self.eos_token_ids, stops) for _ in range(request.batch)]
        if stops:
            for step in request.steps():
                for row, tokens, done in zip(rows, step.committed, step.done):
                    row.add(tokens, done)
                if all(row.finish for row in rows):
                    request.cancel()            # every row stopped: its rows leave the batch
                    break
        else:
            for row, tokens in zip(rows, request.result().new_tokens):
                row.add(tokens, done=True)
        for row in rows:
            row.end()
        checked = [grammar.validate(r.text) if grammar is not None else (None, None, None, []) for r in rows]
        relaxed = grammar.relaxed if grammar is not None else ()
        texts, ids, reasons = [r.text for r in rows], [r.ids for r in rows], [r.finish for r in rows]
        if isinstance(prompt, str):
            return TextResult(texts[0], ids[0], request.stats, reasons[0], *checked[0], relaxed)
        return TextResult(texts, ids, request.stats, reasons, *map(list, zip(*checked)), relaxed)

    def grammar(self, json_schema: dict | str | None = None, regex: str | None = None, **options):
        """The compiled constraint (suite.constraint.Grammar) of a JSON schema or a regex over this model's
        vocabulary (cached), or None when neither is given; ValueError naming the fix for a bad one or
        both. options: suite.constraint.check's (backend, strict, approximate)."""
        if json_schema is None and regex is None:
            return None
        from suite.constraint import Compiler
        with self._lock:
            if self._compiler is None:
                vocab = suite.as_adapter(self.model).config.vocab_size
                self._compiler = Compiler(self.tokenizer, vocab, self.eos_token_ids)
        return self._compiler.compile(json_schema=json_schema, regex=regex, **options)

    def stream(self, prompt: str, decoder: str = DEFAULT_DECODER, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
               temperature: float = 0.0,
               top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
               chat: bool = False, json_schema: dict | str | None = None, regex: str | None = None,
               forced_spans: bool | None = None, constraint: dict | None = None, stop: str | list[str] | None = None,
               **decoder_options) -> "TextStream":
        """Iterate text chunks of one prompt as each forward commits tokens. Arguments as in
        `generate`; bad input raises here, before iterating. After iteration the returned
        object's `.text`, `.token_ids` and `.stats` hold the whole result; leaving the iteration
        early cancels the request (its rows leave the batch)."""
        if not isinstance(prompt, str):
            raise ValueError("stream takes one prompt (a str); use generate for a list")
        stops = check_stops(stop)
        grammar = self.grammar(json_schema, regex, **(constraint or {}))
        request = self._submit(prompt, decoder, max_new_tokens, temperature, top_k, top_p, seed, chat,
                               decoder_options, stream=True, grammar=grammar, forced_spans=forced_spans)
        return TextStream(self, request, grammar, stops)

    @property
    def scheduler(self):
        """This model's suite.scheduler.Scheduler (its stepping thread starts on the first request):
        every generate and stream call of this generator, from any thread, goes through it."""
        with self._lock:
            if self._scheduler is None:
                from suite.scheduler import Scheduler
                self._scheduler = Scheduler(self.target, name=f"scheduler {self.name}", prefix_cache=self.prefix_cache)
            return self._scheduler

    def compile(self, setting: str = "default", max_cache_len: int = 2048, widths=(1,), background: bool = True):
        """Run requests on compiled decode steps (suite.models.static_cache.StaticHFCausalLM): a static
        cache of `max_cache_len` slots (a request's prompt + max_new_tokens must fit), the forwards of
        `widths` (1: ar's and every decoder's plain steps) compiled with the inductor `setting`
        (suite.models.compiled), artifacts cached on disk; prefill and other widths run eagerly.
        background: compiled in a thread while steps run eagerly (a server starts at once); else here.
        Call it before the first request. Returns the adapter."""
        from suite.models.static_cache import StaticHFCausalLM
        with self._lock:
            if self._scheduler is not None:
                raise ValueError("compile() must come before the first request (text.load(compile=...))")
            self.adapter = StaticHFCausalLM(self.model, max_cache_len, compiled_widths=widths, setting=setting)
        uses_hidden = self.draft_folder is not None          # eagle, and auto with eagle, read hidden states
        self.adapter.warm(background=background, hidden=(False, True) if uses_hidden else (False,))
        return self.adapter

    def fix_step(self, width: int | None = None, setting: str | None = None, background: bool = True):
        """Run every decode step `width` slots wide (suite.models.step: default STEP_WIDTH) over a static
        cache, prompts prefilled in fixed chunks first; with an inductor `setting` that one step is
        compiled (in the background unless background=False). Call it before the first request."""
        from suite.models.step import STEP_WIDTH, fixed_step
        with self._lock:
            if self._scheduler is not None:
                raise ValueError("fix_step() must come before the first request (text.load(step='fixed'))")
            self.adapter = fixed_step(self.model, width or STEP_WIDTH, setting=setting)
        if setting is not None:
            self.adapter.warm(background=background, hidden=(False, True) if self.draft_folder is not None else (False,))
        return self.adapter

    def use_prefix_cache(self, max_bytes: int | None = 512 << 20):
        """Keep finished prompts' and outputs' K/V (suite.prefix_cache) so later requests sharing a
        prefix (a chat's history, a system prompt) skip its prefill; max_bytes None turns it off.
        Returns the PrefixCache (its `counters()`), or None."""
        from suite.prefix_cache import PrefixCache
        cache = None if max_bytes is None else PrefixCache(max_bytes)
        with self._lock:
            self.prefix_cache = cache
            if self._scheduler is not None:
                self._scheduler.prefix_cache = cache
        return cache

    def _submit(self, prompt, decoder, max_new_tokens, temperature, top_k, top_p, seed, chat, options,
                stream: bool = False, grammar=None, forced_spans: bool | None = None):
        """Queue a request: the prompts' rows and its `suite.RequestParams`, built once, through
        `suite.prepare` (in Scheduler.submit), which checks everything but the prompt text; a grammar
        gives each row its own constraint (suite.RequestInputs.constraints)."""
        return self.submit_rows(self.rows(prompt, chat), decoder, max_new_tokens, temperature, top_k, top_p, seed,
                                stream=stream, grammar=grammar, forced_spans=forced_spans, **options)

    def submit_rows(self, rows: list[list[int]], decoder: str = DEFAULT_DECODER,
                    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                    temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                    seed: int | None = None, stream: bool = False, grammar=None, forced_spans: bool | None = None,
                    **options):
        """Queue a request of token id rows (a front end that builds its own prompts: apps.serve's chat
        messages) and return its suite.scheduler.Request (steps(), result(), cancel()). grammar: a
        `grammar(...)` constraint for every row. Bad options raise here."""
        if decoder == "auto" and self.decoders:        # a canvas model: its own sampler
            decoder = self.decoders[0]
        if isinstance(decoder, str):
            options = self._options(decoder, options)
        inputs = None
        if grammar is not None:
            forced = forced_spans if forced_spans is not None else getattr(decoder, "name", decoder) != "ar"
            inputs = suite.RequestInputs(constraints=grammar.rows(len(rows), bool(forced)))
        params = suite.RequestParams(decoder, max_new_tokens, temperature, top_k, top_p, seed, inputs=inputs,
                                     decoder_options=options)
        return self.scheduler.submit(rows, params, stream=stream)

    def decoder(self, name: str, **options):
        """The decoder `name` with `options`; eagle and auto get this model's draft head unless
        draft_head= is given. ValueError for unknown names or options."""
        return suite.make_decoder(name, **self._options(name, options))

    def bench_decoder(self, name: str, **options):
        """`decoder(name, **options)` as a bench runs it (`bench_options`)."""
        return self.decoder(name, **self.bench_options(name, **options))

    @staticmethod
    def bench_options(name: str, **options) -> dict:
        """`options` of decoder `name` as a bench runs it: suffix (also as auto's candidate) with a global
        tree of its own, empty at the start, so that runs of the same prompts under several settings do not
        draft from each other's answers (the model's shared tree would hold them)."""
        from suite.decoders.chain.suffix_tree import SuffixTree
        if name == "suffix":
            return {"global_tree": SuffixTree(200_000), **options}
        if name == "auto":
            inner = options.get("options") or {}
            return {**options, "options": {**inner, "suffix": {"global_tree": SuffixTree(200_000),
                                                               **inner.get("suffix", {})}}}
        return options

    @property
    def target(self):
        """What requests run on: the generator's adapter (a fixed step, a compiled one), else its model."""
        return self.adapter if self.adapter is not None else self.model

    def _options(self, name: str, options: dict) -> dict:
        """`options` for the decoder `name`: eagle and auto get this model's draft head unless
        draft_head= is given."""
        if name in ("eagle", "auto") and "draft_head" not in options:
            options = {**options, "draft_head": self.draft_head()}
        if name in ("sam_decoding", "token_recycling"):
            options = {**self.sam_options(), **options}
        if name == "auto":              # its candidates' own options over these models' defaults
            options = {**options, "options": {**{n: self.sam_options() for n in ("sam_decoding", "token_recycling")},
                                              **(options.get("options") or {})}}
        return options

    def sam_options(self) -> dict:
        """sam_decoding's static corpus and token_recycling's hot start (the shipped default,
        text/weights/sam_corpus) with this model's tokenizer."""
        return {"corpus": SAM_CORPUS if SAM_CORPUS.is_file() else None, "tokenizer": self.tokenizer}

    def draft_head(self):
        """The EAGLE draft head of this model (loaded once), or where its weights should be when
        they cannot be loaded (eagle then raises naming `python -m text.train_draft`; auto runs
        without it and says so once), or None for a model without one."""
        if self._head is None and self.draft_folder is not None:
            from suite.decoders.chain.eagle_head import EagleHead
            try:
                self._head = EagleHead.from_folder(self.draft_folder).to(self.model.device)
            except ValueError:
                return self.draft_folder
        return self._head


class TextStream:
    """Iterator of text chunks; the chunks join to `.text` (text.row_text.RowText: decoded in full each
    step, the new suffix yielded, held back while it ends inside a multi-byte character or may begin a
    stop string)."""

    def __init__(self, gen: TextGenerator, request, grammar=None, stops: list[str] | None = None):
        self._gen, self._request, self._grammar = gen, request, grammar
        self._row = RowText(gen.decode, gen.eos_token_ids, stops or [])
        self.token_ids = self._row.ids
        self.text = ""          # what has been yielded so far (all of it once iteration ends)
        self.stats = request.stats   # live: updated after every forward
        self.finish_reason: str | None = None
        self.json: Any = None            # json_schema= / regex=: as TextResult.json, once iteration ends
        self.parse_error: str | None = None
        self.valid: bool | None = None          # as TextResult's, once iteration ends
        self.validation_errors: list[str] = []
        self.relaxed = grammar.relaxed if grammar is not None else ()

    def __iter__(self) -> Iterator[str]:
        row = self._row
        try:
            for step in self._request.steps():
                chunk = row.add(step.committed[0], step.done[0])
                self.text = row.text
                if chunk:
                    yield chunk
                if row.finish:
                    break
        finally:
            if not self._request.done:      # the reader left early, or a stop string ended it: free the rows
                self._request.cancel()
        chunk = row.end()
        self.text, self.finish_reason = row.text, row.finish
        if chunk:
            yield chunk
        if self._grammar is not None:
            self.json, self.parse_error, self.valid, self.validation_errors = self._grammar.validate(row.text)
