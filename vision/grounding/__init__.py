"""Box grounding: referring expressions -> boxes (axis-aligned or oriented), decoded a whole box
block per forward (`parallel_box`), validated with AR fallback (`hybrid`), or slot by slot (`ar`).

    import vision
    grd = vision.load_grounding_pipeline()
    res = grd(image, "the red circle", decoder="hybrid")
    res.boxes, res.scores, res.stats          # boxes in pixels; task="obb" adds res.angles
"""
from __future__ import annotations

__all__ = ["GroundingPipeline", "GroundingResult", "load_grounding_pipeline"]


def __getattr__(name: str):
    if name in ("GroundingPipeline", "GroundingResult", "load_grounding_pipeline"):
        from . import pipeline
        return getattr(pipeline, name)
    raise AttributeError(f"module 'vision.grounding' has no attribute {name!r}")
