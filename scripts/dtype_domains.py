"""bfloat16 against float32 for every domain's embedded model, in one run: wall-time ratio (best
of --rounds, the two dtypes alternated) and agreement of the outputs (BENCHMARKS.md "dtype across
the suite"). Each domain's bench takes --dtype as well; text's figures come from
`python -m text.bench --peers`.

    python scripts/dtype_domains.py [--rounds 3] [--only ocr image ...]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

DTYPES = ("float32", "bfloat16")


def ocr_case():
    import document
    from document import data
    images = [s.image for s in data.heldout_set(200)]
    readers = {d: document.load_ocr(dtype=d) for d in DTYPES}
    return "OCR, 200 held-out lines, ar", lambda d: readers[d](images, decoder="ar").texts, "lines"


def image_case():
    import vision
    pipes = {d: vision.load_image_pipeline(dtype=d) for d in DTYPES}
    return "image prior, 8 images, ar (sampled, seed 0)", \
        lambda d: pipes[d](list(range(8)), decoder="ar", seed=0).tokens.flatten().tolist(), "codes"


def video_case():
    import vision
    pipes = {d: vision.load_video_pipeline(dtype=d) for d in DTYPES}
    return "video prior, 2 clips x 8 frames, diagonal (sampled, seed 0)", \
        lambda d: pipes[d](["star", "ring"], motion="left", decoder="diagonal", seed=0).tokens.flatten().tolist(), "codes"


def grounding_case():
    import vision
    from vision.grounding import data
    items = data.heldout(48, "aabb")
    images, queries = [s.image for s, _ in items], [q.text for _, q in items]
    pipes = {d: vision.load_grounding_pipeline(dtype=d) for d in DTYPES}
    return "grounding, 48 held-out queries, ar", \
        lambda d: [tuple(r.tokens) for r in pipes[d](images, queries, decoder="ar", score=False)], "answers"


def asr_case():
    import speech
    from speech.data import synthesize
    texts = ["remove and return an item from the queue", "the quick brown fox jumps over the lazy dog",
             "return the number of items in the list", "open the file and read every line"] * 5
    clips = [synthesize(t, "flite:rms") for t in texts]
    models = {d: speech.load_asr(dtype=d) for d in DTYPES}
    return "ASR, 20 utterances, ar", lambda d: [models[d](c, 16000, decoder="ar").text for c in clips], "texts"


def tts_case():
    import speech
    models = {d: speech.load_tts(dtype=d) for d in DTYPES}
    sentences = ["Remove and return an item from the queue.", "Open the file and read every line."]
    return "TTS, 2 sentences, delay (sampled, seed 0)", \
        lambda d: [models[d](s, decoder="delay", seed=0).codes.flatten().tolist() for s in sentences], "codes"


CASES = {"ocr": ocr_case, "image": image_case, "video": video_case, "grounding": grounding_case,
         "asr": asr_case, "tts": tts_case}


def agreement(a: list, b: list) -> float:
    """Share of equal items (flat lists of codes, or of texts/answers)."""
    n = max(len(a), len(b))
    return sum(x == y for x, y in zip(a, b)) / n if n else 1.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=list(CASES), default=list(CASES))
    args = p.parse_args()
    torch.set_num_threads(1)
    print("| case | fp32 s | bf16 s | bf16 speedup | outputs equal |\n| --- | ---: | ---: | ---: | ---: |")
    for name in args.only:
        title, run, unit = CASES[name]()
        outs = {d: run(d) for d in DTYPES}            # warm-up; the outputs compared
        best = {d: float("inf") for d in DTYPES}
        for _ in range(args.rounds):
            for d in DTYPES:
                t0 = time.perf_counter()
                run(d)
                best[d] = min(best[d], time.perf_counter() - t0)
        print(f"| {title} | {best['float32']:.2f} | {best['bfloat16']:.2f} | "
              f"{best['float32'] / best['bfloat16']:.2f}x | {agreement(outs['float32'], outs['bfloat16']):.1%} of {unit} |",
              flush=True)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
