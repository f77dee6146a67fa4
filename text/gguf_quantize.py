"""GGUF files of other types made with llama.cpp's own quantizer (`llama_model_quantize`, llama-cpp-python).

    python -m text.gguf_quantize model.gguf model.Q8_0.gguf --type Q8_0

`embedded_gguf(kind)` is the embedded SmolLM2's shipped Q4_1 file requantized into `kind` (F32, F16, BF16, Q8_0,
Q4_K_M, ...) once, kept in the parasuite cache: the files the llama.cpp tests and benchmarks run. (A file
requantized from Q4_1 carries Q4_1's precision in another type's layout: the kernels of that type run.)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TYPES = {"F32": "LLAMA_FTYPE_ALL_F32", "F16": "LLAMA_FTYPE_MOSTLY_F16", "BF16": "LLAMA_FTYPE_MOSTLY_BF16",
         "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "Q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
         "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M", "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
         "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K"}


def quantize(source, out, kind: str, threads: int | None = None) -> Path:
    """Write `source` as a GGUF of type `kind` at `out` (through a temp file: nothing half-written is left)."""
    from suite.models.llama_cpp import import_llama_cpp
    if kind not in TYPES:
        raise ValueError(f"unknown GGUF type {kind!r}: use one of {', '.join(TYPES)}")
    ll = import_llama_cpp()
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    params = ll.llama_model_quantize_default_params()
    params.ftype = getattr(ll, TYPES[kind])
    params.allow_requantize = True
    params.nthread = threads or 0
    try:
        if ll.llama_model_quantize(str(source).encode(), str(tmp).encode(), params) != 0:
            raise ValueError(f"llama.cpp could not write {source} as {kind}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def embedded_gguf(kind: str) -> Path:
    """The embedded SmolLM2 as a `kind` GGUF, made once into the cache (Q4_1: the shipped file itself)."""
    from suite.runtime.storage import cache_dir

    from .model import gguf_path
    if kind == "Q4_1":
        return gguf_path()
    out = cache_dir("gguf") / f"SmolLM2-135M-Instruct.{kind}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        quantize(gguf_path(), out, kind)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m text.gguf_quantize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--type", default="Q8_0", choices=sorted(TYPES))
    args = p.parse_args(argv)
    if not args.source.is_file():
        p.error(f"no GGUF file at {args.source}")
    print(quantize(args.source, args.out, args.type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
