"""A user's model folder: checked (config, tokenizer) and its tokenizer loaded, with errors naming the fix."""
from __future__ import annotations

from pathlib import Path

from .model import quiet_transformers

# files any transformers tokenizer folder has at least one of
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model",
                   "spiece.model", "vocab.txt", "sentencepiece.bpe.model")


def check_folder(path) -> Path:
    """The model folder at `path`, or ValueError naming what is wrong (no folder, no config.json, no tokenizer)."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ValueError(f"no model folder at {str(path)!r}: pass an existing local folder saved with "
                         "save_pretrained (hub ids are not fetched), or omit the path for the embedded model")
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise ValueError(f"{str(path)!r} is not a transformers model folder (no config.json): pass the folder "
                         "that model.save_pretrained() wrote")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(f"the folder {str(path)!r} has no tokenizer: save one there with "
                         f"tokenizer.save_pretrained({str(path)!r})")
    return folder


def load_tokenizer(folder: Path, path):
    from transformers import AutoTokenizer
    with quiet_transformers():
        try:
            return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"cannot load the tokenizer in {str(path)!r} ({first_line(e)}): save a working one "
                             "there with tokenizer.save_pretrained()") from e


def load_model(model_class, folder: Path, path, dtype, saved_from: str):
    """`model_class.from_pretrained` of a checked folder, offline, in eval mode; a failure names the
    folder as typed and the class (`saved_from`) it should have been saved from."""
    with quiet_transformers():
        try:
            return model_class.from_pretrained(str(folder), local_files_only=True, dtype=dtype).eval()
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"cannot load {str(path)!r} ({first_line(e)}): pass a folder saved with "
                             f"save_pretrained from {saved_from}") from e


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
