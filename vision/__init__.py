"""parasuite vision: class-conditional AR image generation (VQ tokenizer + Llama prior) decoded
with suite's parallel decoders (ar, sjd, mc_sjd, zipar, zipar_sjd, lpd).

    import vision
    pipe = vision.load_image_pipeline()
    res = pipe(["circle", 3], decoder="zipar", seed=0)
    res.images, res.tokens, res.stats

`import vision` stays light: torch, diffusers and transformers load on first use.
"""
from __future__ import annotations

__all__ = ["ImagePipeline", "ImageResult", "load_image_pipeline"]
_GROUNDING = ["GroundingPipeline", "GroundingResult", "load_grounding_pipeline"]
_VIDEO = ["VideoFrame", "VideoPipeline", "VideoResult", "load_video_pipeline"]


def __getattr__(name: str):
    if name in _GROUNDING:   # box grounding: vision/grounding/
        from . import grounding
        return getattr(grounding, name)
    if name in _VIDEO:       # video generation: vision/video/
        from .video import pipeline as video
        return getattr(video, name)
    if name in __all__:
        from . import pipeline
        return getattr(pipeline, name)
    raise AttributeError(f"module 'vision' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__ + _GROUNDING + _VIDEO)
