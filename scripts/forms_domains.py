"""The load-time linear forms (suite.models.linear_forms: per-width matmul forms measured fastest on
this CPU, q/k/v and gate/up fused) against plain nn.Linear layers on the OCR, TTS and ASR models, in
one run: each model loaded twice, one copy swapped and one plain (whatever its loader does), each
decoder's wall time (best of --rounds, plain and forms alternated) and whether the outputs are
identical (BENCHMARKS.md "Forms on the OCR, TTS and ASR models"). Same inputs and timing as
scripts/dtype_domains.py.

    PYTHONPATH=. python scripts/forms_domains.py [--rounds 3] [--only ocr tts asr]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's packages, not an installed one's

from dtype_domains import TTS_SENTENCES, agreement, asr_clips, interleaved, ocr_images  # noqa: E402

VARIANTS = ("plain", "forms")


def set_forms(modules, variant: str) -> dict:
    """Swap (forms) or unswap (plain) the linear layers of `modules`; the swapped layers' description."""
    from suite.models.linear_forms import describe, swap_linears, unswap_linears
    out = {}
    for m in modules:
        if variant == "forms":
            swap_linears(m)
        else:
            unswap_linears(m)
        for k, n in describe(m).items():
            out[k] = out.get(k, 0) + n
    return out


def ocr_case():
    """OCR: the GPT-2 decoder that runs every step (its Conv1D projections are not nn.Linear: only
    the LM head swaps); ar and ctc_speculative on 200 held-out lines."""
    import document
    images = ocr_images()
    readers = {v: document.load_ocr() for v in VARIANTS}
    layers = {v: set_forms([r.adapter.model.decoder], v) for v, r in readers.items()}
    return "OCR, 200 held-out lines", ("ar", "ctc_speculative"), \
        lambda v, dec: readers[v](images, decoder=dec).texts, "lines", layers["forms"]


def tts_case():
    """TTS: every TTS model (frame, delay, stack, flat: backbone and heads; the codec is not a
    decoder); delay (the default) and flat (ar over the flat model), sampled with seed 0."""
    import speech
    models = {v: speech.load_tts() for v in VARIANTS}

    def owned(tts):
        found = [tts.frame.model, tts.delay.model, tts.stack.model] + ([tts.flat.model] if tts.flat else [])
        return list({id(m): m for m in found}.values())

    layers = {v: set_forms(owned(t), v) for v, t in models.items()}
    return "TTS, 2 sentences (sampled, seed 0)", ("delay", "flat"), \
        lambda v, dec: [models[v](s, decoder=dec, seed=0).codes.flatten().tolist() for s in TTS_SENTENCES], \
        "sentences", layers["forms"]


def asr_case():
    """ASR: the Llama attention decoder (the encoder and CTC head run once per utterance); ar and
    ctc_speculative (the default) on 20 utterances."""
    import speech
    clips = asr_clips()
    models = {v: speech.load_asr() for v in VARIANTS}
    layers = {v: set_forms([m.model.decoder], v) for v, m in models.items()}
    return "ASR, 20 utterances", ("ar", "ctc_speculative"), \
        lambda v, dec: [models[v](c, 16000, decoder=dec).text for c in clips], "texts", layers["forms"]


CASES = {"ocr": ocr_case, "tts": tts_case, "asr": asr_case}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=list(CASES), default=list(CASES))
    args = p.parse_args()
    torch.set_num_threads(1)
    notes = []
    print("| domain | decoder | plain s | forms s | ratio | outputs equal |\n| --- | --- | ---: | ---: | ---: | ---: |")
    for name in args.only:
        title, decoders, run, unit, layers = CASES[name]()
        notes.append(f"{name}: " + "; ".join(f"{k} x{n}" for k, n in layers.items()))
        for dec in decoders:
            outs, best = interleaved(lambda v: run(v, dec), VARIANTS, args.rounds)
            same = agreement(outs["plain"], outs["forms"])
            print(f"| {title} | {dec} | {best['plain']:.2f} | {best['forms']:.2f} | "
                  f"{best['plain'] / best['forms']:.2f}x | {'yes' if same == 1 else f'{same:.1%} of {unit}'} |",
                  flush=True)
    print("\nswapped layers (suite.models.linear_forms.describe):\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
