"""Concurrent requests to a transformers VLM folder share forwards (suite.vlm through its
scheduler): the same calls one at a time, then all at once in threads, round after round.

    python scripts/vlm_batching.py FOLDER [--users 4] [--rounds 3] [--max-new-tokens 32] [--decoder ar]
    python scripts/vlm_batching.py --tiny qwen2_vl     # a tiny random config (tests/tiny_vlm.py) in a temp folder
    python scripts/vlm_batching.py --tiny qwen2_vl --smol   # its text decoder at SmolLM2-135M's size (random weights)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))      # tiny_vlm: the pages, the tiny configs
from concurrent_rounds import rounds  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", nargs="?")
    p.add_argument("--tiny", help="a family of tests/tiny_vlm.py instead of a folder")
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--decoder", default="ar")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--smol", action="store_true", help="--tiny: the text decoder at SmolLM2-135M's size")
    args = p.parse_args()
    if (args.folder is None) == (args.tiny is None):
        p.error("give a VLM folder or --tiny FAMILY")
    torch.set_num_threads(args.threads)
    from suite.vlm import load_vlm
    folder = args.folder
    if args.tiny:
        import tiny_vlm
        if args.smol:
            tiny_vlm.HIDDEN.update(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3)
        from text.model import ensure_converted
        folder = tiny_vlm.BUILDERS[args.tiny](ensure_converted(), Path(tempfile.mkdtemp()))
    vlm = load_vlm(folder)
    from tiny_vlm import images
    batches = [ask(vlm, picture) for picture in images(args.users, size=(60, 80))]

    def call(i):
        options = {"draft": "self:1"} if args.decoder == "speculative" else {}
        return vlm.generate(None, None, decoder=args.decoder, max_new_tokens=args.max_new_tokens, batch=batches[i],
                            **options).tokens

    rounds(call, list(range(args.users)), args.users, args.rounds, lambda a, b: a == b,
           f"{vlm.family}, {args.decoder}, {args.users} requests of {args.max_new_tokens} tokens")


def ask(vlm, picture):
    """The processor batch of one request: the family's page-reading prompt, or its grounding one."""
    from document.hf_reader import FAMILIES as READERS, HFPageReader
    if vlm.family in READERS:
        return HFPageReader(vlm).batch([picture])
    from vision.hf_grounding import prompt
    return vlm.inputs([picture], [prompt(vlm.family, "a cat")])


if __name__ == "__main__":
    main()
