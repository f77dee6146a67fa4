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

__all__ = ["ASR", "ASRResult", "TTS", "TTSResult", "load_asr", "load_tts", "register_decoders"]


def register_decoders() -> None:
    """Add the speech decoders (delay, parallel, local_ar, local_maskgit, stack, stack_local, ctc_speculative)
    to suite's registry."""
    import suite
    from suite.decoders.ctc_speculative import CTCSpeculative
    from suite.decoders.delay import Delay
    from suite.decoders.local_ar import LocalAR
    from suite.decoders.local_maskgit import LocalMaskGIT
    from suite.decoders.parallel import Parallel
    from suite.decoders.stack import Stack
    from suite.decoders.stack_local import StackLocal
    for cls in (Delay, Parallel, LocalAR, LocalMaskGIT, Stack, StackLocal, CTCSpeculative):
        if cls.name not in suite.DECODERS:
            suite.register(cls)


def __getattr__(name: str):
    if name in ("ASR", "ASRResult", "load_asr"):
        from . import asr
        register_decoders()
        return getattr(asr, name)
    if name in ("TTS", "TTSResult", "load_tts"):
        from . import tts
        register_decoders()
        return getattr(tts, name)
    if name == "register_decoders":
        return register_decoders
    raise AttributeError(f"module 'speech' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
