"""The tokenizer of a GGUF file on the llama.cpp engine, read from the vocabulary llama.cpp has already loaded.

`LlamaCppTokenizer` answers what the text front ends ask of a tokenizer (call, decode, batch_decode, the chat
template, EOS/pad ids, convert_tokens_to_ids, get_vocab, len) through llama.cpp's own `llama_tokenize` and
`llama_detokenize`, with the file's Jinja chat template rendered as transformers renders it. Building
transformers' tokenizer of the same file costs about 58 MiB resident for SmolLM2 (its Rust BPE tables and
transformers' import) beside the 16 MiB llama.cpp's vocabulary already holds: the llama.cpp engine's memory
target (BENCHMARKS.md). Structured output compiles grammars against transformers' tokenizer
(`for_grammar`, built on first use). Token ids equal transformers' on the tests' and benches' prompts
(tests/text/test_llama_cpp.py).
"""
from __future__ import annotations

import ctypes
from functools import cached_property

EOS_TOKEN = "<|im_end|>"


class LlamaCppTokenizer:
    padding_side = "left"

    def __init__(self, engine, grammar_tokenizer=None):
        """engine: suite.models.llama_cpp.LlamaCppEngine; grammar_tokenizer: () -> transformers' tokenizer of
        the same file (structured output's, built only when asked)."""
        self.ll, self.vocab, self.engine = engine.ll, engine.vocab, engine
        self.name_or_path = str(engine.path)
        self.chat_template = engine.meta("tokenizer.chat_template")
        self._grammar_tokenizer = grammar_tokenizer
        ll, v = self.ll, self.vocab
        self.bos_token_id = _id_or_none(ll.llama_vocab_bos(v))
        self._add_bos = bool(ll.llama_vocab_get_add_bos(v)) and self.bos_token_id is not None
        unk = engine.meta("tokenizer.ggml.unknown_token_id")
        self.unk_token_id = int(unk) if unk is not None else None
        eos = _id_or_none(ll.llama_vocab_eos(v))
        end_turn = self._special_id(EOS_TOKEN)
        if end_turn is not None and eos is not None and self.piece(eos) == "<|im_start|>":
            eos = end_turn     # a ChatML file naming <|im_start|> as EOS (llama.cpp's SmolLM2 files): turns end with <|im_end|>
        self.eos_token_id = eos
        pad = _id_or_none(ll.llama_vocab_pad(v))
        self.pad_token_id = eos if pad is None or pad == self.bos_token_id else pad

    # -- tokens <-> strings -------------------------------------------------------------------------

    def piece(self, token_id: int) -> str:
        """The token as the vocabulary writes it (transformers' convert_ids_to_tokens: 'Ġthe' for byte-level BPE)."""
        return self.ll.llama_vocab_get_text(self.vocab, int(token_id)).decode("utf-8", "replace")

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_token_id is None else self.piece(self.eos_token_id)

    @eos_token.setter
    def eos_token(self, token: str) -> None:
        self.eos_token_id = self.convert_tokens_to_ids(token)

    @property
    def pad_token(self) -> str | None:
        return None if self.pad_token_id is None else self.piece(self.pad_token_id)

    @pad_token.setter
    def pad_token(self, token: str) -> None:
        self.pad_token_id = self.convert_tokens_to_ids(token)

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_token_id is None else self.piece(self.bos_token_id)

    @cached_property
    def _ids(self) -> dict[str, int]:
        return {self.piece(i): i for i in range(len(self))}

    def get_vocab(self) -> dict[str, int]:
        return dict(self._ids)

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._ids.get(tokens, self.unk_token_id)
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        return self.piece(ids) if isinstance(ids, int) else [self.piece(i) for i in ids]

    def _special_id(self, token: str) -> int | None:
        ids = self.encode(token, add_special_tokens=False)
        return ids[0] if len(ids) == 1 and self.piece(ids[0]) == token else None

    def __len__(self) -> int:
        return self.ll.llama_vocab_n_tokens(self.vocab)

    # -- text -> ids --------------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special tokens written in it (`<|im_start|>`) are read as such, as transformers
        does; BOS first where the file asks for it and add_special_tokens is on."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (self.ll.llama_token * cap)()
        n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special_tokens and self._add_bos, True)
        if n < 0:                       # more tokens than bytes (cannot happen for byte-level BPE): grow once
            cap = -n
            buf = (self.ll.llama_token * cap)()
            n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special_tokens and self._add_bos, True)
        return list(buf[:n])

    def __call__(self, text, add_special_tokens: bool = True, padding: bool = False, return_tensors=None, **_):
        single = isinstance(text, str)
        rows = [self.encode(t, add_special_tokens) for t in ([text] if single else text)]
        masks = [[1] * len(r) for r in rows]
        if padding:
            width = max(map(len, rows), default=0)
            pad = self.pad_token_id if self.pad_token_id is not None else 0
            left = self.padding_side == "left"
            rows = [([pad] * (width - len(r)) + r) if left else (r + [pad] * (width - len(r))) for r in rows]
            masks = [([0] * (width - len(m)) + m) if left else (m + [0] * (width - len(m))) for m in masks]
        if return_tensors == "pt":
            import torch
            return {"input_ids": torch.tensor(rows, device="cpu"), "attention_mask": torch.tensor(masks, device="cpu")}
        if return_tensors is not None:
            raise ValueError(f"return_tensors={return_tensors!r}: the llama.cpp tokenizer returns 'pt' or lists")
        return {"input_ids": rows[0] if single else rows, "attention_mask": masks[0] if single else masks}

    # -- ids -> text --------------------------------------------------------------------------------

    def decode(self, token_ids, skip_special_tokens: bool = False, **_) -> str:
        """Text of `token_ids` (a cut multi-byte character reads as U+FFFD, as transformers' byte-level decoder);
        control tokens written out unless skip_special_tokens."""
        ids = [int(t) for t in (token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids)]
        if not ids:
            return ""
        toks = (self.ll.llama_token * len(ids))(*ids)
        cap = 8 * len(ids) + 16
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            n = self.ll.llama_detokenize(self.vocab, toks, len(ids), buf, cap, False, not skip_special_tokens)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", "replace")
            cap = -n + 16
        raise RuntimeError("llama.cpp could not detokenize these ids")

    def batch_decode(self, sequences, skip_special_tokens: bool = False, **kw) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens, **kw) for s in sequences]

    # -- chat ---------------------------------------------------------------------------------------

    def apply_chat_template(self, conversation, add_generation_prompt: bool = False, tokenize: bool = True, **kw):
        """The file's chat template rendered as transformers renders it (sandboxed Jinja, trim_blocks and
        lstrip_blocks, raise_exception, the special tokens as variables)."""
        if not self.chat_template:
            raise ValueError(f"the GGUF file {self.name_or_path!r} has no chat template (tokenizer.chat_template)")
        text = _template(self.chat_template).render(
            messages=conversation, add_generation_prompt=add_generation_prompt, bos_token=self.bos_token or "",
            eos_token=self.eos_token or "", pad_token=self.pad_token or "", **kw)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def for_grammar(self):
        """transformers' tokenizer of the same file (suite.constraint's backends read its vocabulary)."""
        if self._grammar_tokenizer is None:
            raise ValueError("structured output needs transformers' tokenizer of this GGUF file: load it with "
                             "text.load(path, engine='llama.cpp')")
        if not hasattr(self, "_grammar"):
            self._grammar = self._grammar_tokenizer()
        return self._grammar


def _id_or_none(token_id: int) -> int | None:
    return int(token_id) if token_id is not None and token_id >= 0 else None


_TEMPLATES: dict[str, object] = {}


def _template(source: str):
    if source not in _TEMPLATES:
        from datetime import datetime

        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        _TEMPLATES[source] = env.from_string(source)
    return _TEMPLATES[source]


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    import json
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
