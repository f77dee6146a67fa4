"""`python scripts/on_device.py DEVICE MODULE [ARGS...]`: run `python -m MODULE ARGS` with the
models its loaders return moved to DEVICE (cuda on the GPU machine; cpu: a dry run, nothing moves).

The domain benches (text.bench, vision.bench, vision.video.bench, document.bench, speech.bench)
have no --device option: they decode on the CPU. Their pipelines follow their model's device
(every request tensor is made on the adapter's device, inputs are moved once at suite.prepare),
so moving the loaded models is enough to bench them on a GPU. Moved here, at load time:
text.load (SmolLM2, and its EAGLE head, which follows the model), the VQ tokenizer, the image and
video priors, the OCR model and the speech modules (codec, TTS models, recogniser). The metric
models (classifiers, MobileNetV2 for the Frechet distance, pocketsphinx) stay on the CPU: they read
PIL images and numpy audio. Each move is printed, so a log shows what ran where.
A bench that gains a --device option of its own makes this wrapper unnecessary for it.
"""
from __future__ import annotations

import runpy
import sys


def _moved(device: str, what: str, obj, module):
    module.to(device)
    print(f"on_device: {what} -> {device}", file=sys.stderr, flush=True)
    return obj


def patch_loaders(device: str) -> None:
    import text
    from document.model import OCRModel
    from suite.runtime.storage import ConfigModule
    from vision.prior import ImagePrior
    from vision.tokenizer import VQTokenizer
    from vision.video.prior import VideoPrior

    text_load = text.load

    def load_text(path=None, **kw):
        kw.setdefault("device", device)
        print(f"on_device: text.load({path!r}) -> {kw['device']}", file=sys.stderr, flush=True)
        return text_load(path, **kw)

    text.load = load_text

    def wrap(cls, attr, inner, what):
        original = cls.__dict__[attr].__func__          # the classmethod's function

        def load(klass, *args, **kwargs):
            obj = original(klass, *args, **kwargs)
            return _moved(device, f"{what or klass.__name__}.load", obj, inner(obj))

        setattr(cls, attr, classmethod(load))

    wrap(VQTokenizer, "load", lambda t: t.vq, "VQTokenizer")
    wrap(ImagePrior, "load", lambda p: p.model, "ImagePrior")
    wrap(VideoPrior, "load", lambda p: p.model, "VideoPrior")
    wrap(OCRModel, "load", lambda m: m, "OCRModel")
    wrap(ConfigModule, "load", lambda m: m, None)       # speech: Codec, Recogniser (and TTSModel's super())
    from speech.tts_model import TTSModel
    wrap(TTSModel, "load", lambda m: m, "TTSModel")     # its own load adds heads after super().load


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    device, module, rest = argv[0], argv[1], argv[2:]
    import torch
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: no CUDA GPU here for {device}", file=sys.stderr)
        return 2
    patch_loaders(device)                               # cpu too: a dry run goes through the same moves
    sys.argv = [module, *rest]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
