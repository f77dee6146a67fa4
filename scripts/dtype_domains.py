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


def ocr_images(n: int = 200) -> list:
    """The OCR cases' input: n held-out line images."""
    from document import data
    return [s.image for s in data.heldout_set(n)]


ASR_TEXTS = ["remove and return an item from the queue", "the quick brown fox jumps over the lazy dog",
             "return the number of items in the list", "open the file and read every line"] * 5
TTS_SENTENCES = ["Remove and return an item from the queue.", "Open the file and read every line."]


def asr_clips() -> list:
    """The ASR cases' input: ASR_TEXTS spoken by the held-out voice (flite rms)."""
    from speech.data import synthesize
    return [synthesize(t, "flite:rms") for t in ASR_TEXTS]


def ocr_case():
    import document
    images = ocr_images()
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
    clips = asr_clips()
    models = {d: speech.load_asr(dtype=d) for d in DTYPES}
    return "ASR, 20 utterances, ar", lambda d: [models[d](c, 16000, decoder="ar").text for c in clips], "texts"


def tts_case():
    import speech
    models = {d: speech.load_tts(dtype=d) for d in DTYPES}
    return "TTS, 2 sentences, delay (sampled, seed 0)", \
        lambda d: [models[d](s, decoder="delay", seed=0).codes.flatten().tolist() for s in TTS_SENTENCES], "codes"


CASES = {"ocr": ocr_case, "image": image_case, "video": video_case, "grounding": grounding_case,
         "asr": asr_case, "tts": tts_case}


def agreement(a: list, b: list) -> float:
    """Share of equal items (flat lists of codes, or of texts/answers)."""
    n = max(len(a), len(b))
    return sum(x == y for x, y in zip(a, b)) / n if n else 1.0


def interleaved(run, variants, rounds: int) -> tuple[dict, dict]:
    """Each variant's output (a warm-up run) and best wall time of `rounds`, the variants alternated
    within each round: ({variant: run(variant)}, {variant: seconds})."""
    outs = {v: run(v) for v in variants}
    best = {v: float("inf") for v in variants}
    for _ in range(rounds):
        for v in variants:
            t0 = time.perf_counter()
            run(v)
            best[v] = min(best[v], time.perf_counter() - t0)
    return outs, best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=list(CASES), default=list(CASES))
    args = p.parse_args()
    torch.set_num_threads(1)
    print("| case | fp32 s | bf16 s | bf16 speedup | outputs equal |\n| --- | ---: | ---: | ---: | ---: |")
    for name in args.only:
        title, run, unit = CASES[name]()
        outs, best = interleaved(run, DTYPES, args.rounds)
        print(f"| {title} | {best['float32']:.2f} | {best['bfloat16']:.2f} | "
              f"{best['float32'] / best['bfloat16']:.2f}x | {agreement(outs['float32'], outs['bfloat16']):.1%} of {unit} |",
              flush=True)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
