"""A GGUF file on the llama.cpp engine (`text.load(path, engine="llama.cpp")`): the weights stay in the file at
their own type (no float32 copy), forwards run in llama.cpp (suite.models.llama_cpp), and the tokenizer and chat
template come from the file's own metadata (llama.cpp's vocabulary: text.llama_cpp_tokenizer; structured output
also reads transformers' tokenizer of the file, as the torch engine's conversion reads it).
"""
from __future__ import annotations

import os
from pathlib import Path

from .model import EOS_TOKEN, MARKER, gguf_cache_dir, quiet_transformers

ENGINES = ("torch", "llama.cpp")


def llama_cpp_available() -> bool:
    """Whether llama-cpp-python is installed (it is imported only when a model loads)."""
    import importlib.util
    return importlib.util.find_spec("llama_cpp") is not None


def default_engine(path) -> str:
    """The engine a GGUF file runs on when none is named: llama.cpp where it is installed (faster, and the
    file's own size in memory: BENCHMARKS.md, text section), else torch (dequantised once to float32)."""
    return "llama.cpp" if llama_cpp_available() else "torch"


def check_engine(engine: str | None, gguf: bool) -> None:
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if engine == "llama.cpp" and not gguf:
        raise ValueError("engine='llama.cpp' runs GGUF files: pass a .gguf file, or drop engine for a model folder")


def load_llama_cpp(path, threads: int | None = None, n_ctx: int | None = None):
    """(suite.models.llama_cpp.LlamaCppLM, tokenizer) of a GGUF file; ValueError naming the fix for a missing
    or unreadable file, ImportError naming the install for a missing llama-cpp-python. The tokenizer reads the
    vocabulary llama.cpp loaded (text.llama_cpp_tokenizer: no second copy through transformers; structured
    output builds transformers' tokenizer of the file when first asked)."""
    from dataclasses import replace

    from suite.models.llama_cpp import LlamaCppLM

    from .llama_cpp_tokenizer import LlamaCppTokenizer
    source = Path(path).expanduser()
    if not source.is_file():
        raise ValueError(f"no GGUF file at {str(path)!r}: pass an existing local .gguf file (nothing is downloaded)")
    adapter = LlamaCppLM(source, n_ctx=n_ctx, threads=threads)
    tokenizer = LlamaCppTokenizer(adapter.engine, grammar_tokenizer=lambda: gguf_tokenizer(source))
    if tokenizer.eos_token_id is not None:
        adapter.config = replace(adapter.config, eos_token_ids=frozenset([tokenizer.eos_token_id]),
                                 pad_token_id=tokenizer.eos_token_id)
    return adapter, tokenizer


def gguf_tokenizer(source: Path):
    """The file's tokenizer and chat template, read once (transformers' GGUF reader takes seconds) and kept
    in the cache beside the torch engine's conversions. As on the torch engine, a ChatML file that names
    `<|im_start|>` as EOS (llama.cpp's SmolLM2 files) ends turns with `<|im_end|>` instead."""
    from transformers import AutoTokenizer
    folder = gguf_cache_dir(source).with_name(gguf_cache_dir(source).name + "-tokenizer")
    with quiet_transformers():
        if (folder / MARKER).is_file():
            return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        try:
            tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ValueError(f"cannot read the tokenizer of the GGUF file {str(source)!r} ({first}): pass a GGUF "
                             "of a causal LM whose tokenizer transformers reads (llama, qwen2, mistral, gemma, ...)") from e
    if tok.eos_token == "<|im_start|>" and tok.convert_tokens_to_ids(EOS_TOKEN) != tok.unk_token_id:
        tok.eos_token = tok.pad_token = EOS_TOKEN
    _keep(tok, folder)
    return tok


def _keep(tokenizer, folder: Path) -> None:
    """Save the tokenizer into `folder` through a temp folder (a failed or raced save leaves nothing half-written)."""
    import shutil
    import tempfile
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    except OSError:              # a read-only cache: read the file again next time
        return
    try:
        tokenizer.save_pretrained(str(tmp))
        (tmp / MARKER).write_text("the tokenizer of a GGUF file, read by parasuite text.llama_cpp_engine\n")
        os.replace(tmp, folder)
    except OSError:              # another process saved it first
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


