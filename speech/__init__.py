"""Speech: our own multi-codebook RVQ codec, text-to-speech with codebook-parallel decoders
(flat, delay, parallel, local_ar, local_maskgit, stack, stack_local) and a CTC + attention
recogniser (ctc, ctc_beam, ar, ctc_speculative).

    import speech
    tts = speech.load_tts()
    res = tts("Hello there.", decoder="delay", seed=0)
    res.audio, res.sample_rate, res.codes, res.stats
    for chunk in tts.stream("Hello there."):
        ...
    asr = speech.load_asr()
    asr(res.audio, res.sample_rate).text

`import speech` stays light: torch and transformers load on first use.
"""
from __future__ import annotations

__all__ = ["ASR", "ASRResult", "TTS", "TTSResult", "load_asr", "load_tts"]


def __getattr__(name: str):
    if name in ("ASR", "ASRResult", "load_asr"):
        from . import asr
        return getattr(asr, name)
    if name in ("TTS", "TTSResult", "load_tts"):
        from . import tts
        return getattr(tts, name)
    raise AttributeError(f"module 'speech' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
