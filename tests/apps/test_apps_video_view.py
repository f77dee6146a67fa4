"""The Video tab's handler without a browser, on a tiny random 2-frame video prior behind the
shipped tokenizer: the clip, its frames, per-frame heatmaps on their own scale, what the result is,
compare-with-AR, and an error that clears the outputs."""
import os
import re

import gradio as gr
import numpy as np
import pytest
import torch

WEIGHTS = os.path.join(os.path.dirname(__file__), "..", "..", "vision", "weights")


@pytest.fixture(scope="module")
def pipe():
    """A tiny random 2-frame video prior behind the shipped tokenizer, without an image prior."""
    from vision.tokenizer import VQTokenizer
    from vision.video import data as vdata
    from vision.video.pipeline import VideoPipeline
    from vision.video.prior import VideoLayout, VideoPrior, build_video_prior
    meta = {"codebook_size": 256, "classes": list(vdata.CLASSES), "motions": list(vdata.MOTIONS), "frames": 2,
            "grid": [16, 16], "radius": 1}
    torch.manual_seed(0)
    model = build_video_prior(VideoLayout.from_meta(meta), hidden=32, layers=2, heads=4).eval()
    return VideoPipeline(VQTokenizer.load(os.path.join(WEIGHTS, "tokenizer")), VideoPrior(model, meta))


def endpoint(pipe):
    """The tab's /generate_video endpoint, as the app calls it, and the demo."""
    from apps.video import build_demo
    demo = build_demo(pipe)
    return next(f.fn for f in demo.fns.values() if f.api_name == "generate_video"), demo


@pytest.fixture(scope="module")
def handler(pipe):
    return endpoint(pipe)[0]


def last(views):
    *_, final = views
    return final


def test_video_tab_shows_the_clip_and_when_each_code_was_decided(handler):
    from apps.pictures import RAMP
    from vision.video.io import read_video
    clip, strip, steps, ar_clip, ar_strip, ar_steps, table = last(
        handler("star", "left", 2, "video_zipar", "window=4", 2.0, 0.7, 0, True))
    assert read_video(clip).shape == (2, 256, 256, 3) and read_video(ar_clip).shape == (2, 256, 256, 3)
    assert strip.size == ar_strip.size and strip.width > 2 * 128           # two frames side by side
    # each grid on its own scale: the last code of the last frame is each run's last forward, yellow
    for grid in (steps, ar_steps):
        assert grid.getpixel((grid.width - 2, 30 + 18 + 128 - 2)) == RAMP[-1]
    assert steps.size == ar_steps.size
    # the table: ar first, video_zipar lossy and not the same clip, its forwards fewer than ar's
    assert table.index("<tr data-decoder='ar'") < table.index("<tr data-decoder='video_zipar'")
    assert "data-guarantee='lossy'" in table and "data-same='false'" in table
    forwards = {d: int(re.search(f"<tr data-decoder='{d}'.*?data-stat='forwards'[^>]*>(\\d+)<", table).group(1))
                for d in ("ar", "video_zipar")}
    assert forwards["ar"] == 2 * 256 and forwards["video_zipar"] < forwards["ar"]
    assert "class star, motion left, 2 frames, seed 0" in table


def test_video_tab_exact_decoder_equals_ar_and_streams_frame_by_frame(handler):
    views = list(handler("ring", "grow", 2, "diagonal", "", 2.0, 0.0, 1, True))
    assert views[0][0] is None                                             # no clip before every frame is there
    final = views[-1]
    assert "data-guarantee='exact'" in final[-1] and "data-same='true'" in final[-1]
    assert np.array_equal(np.asarray(final[1]), np.asarray(final[4]))     # greedy: the same frames as ar


@pytest.mark.parametrize("args, message", [
    (("star", "left", 3, "ar", "", 2.0, 0.7, 0, False), "frames must be 1..2"),
    (("star", "spin", 1, "ar", "", 2.0, 0.7, 0, False), "unknown motion 'spin': pick one of left, right"),
    (("star", "left", 1, "lpd", "", 2.0, 0.7, 0, False), "unknown decoder 'lpd': pick one of ar, sjd"),
    (("star", "left", 1, "video_zipar", "window=wide", 2.0, 0.7, 0, False), "option window must be an integer"),
    (("star", "left", 1, "ar", "", 2.0, 0.7, 0, False, "image"), "first_frame='image' needs the image prior"),
])
def test_video_tab_errors_clear_the_outputs_and_name_the_fix(handler, args, message):
    views = handler(*args)
    with pytest.raises(gr.Error, match=message):
        for view in views:
            assert view == (None,) * 6 + ("",)                             # the blank comes first, then the error


def test_video_tab_draws_frame_0_by_the_image_prior_where_there_is_one(pipe):
    """With an image prior the tab's default is frame 0 from it (the library's default too), and says so;
    the video prior's own frame 0 stays one click away."""
    from vision.prior import ImagePrior
    from vision.video.pipeline import VideoPipeline
    both = VideoPipeline(pipe.tokenizer, pipe.prior, ImagePrior.load(os.path.join(WEIGHTS, "prior")))
    run, demo = endpoint(both)
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "video-first-frame")
    assert radio.value == "image" and [v for _, v in radio.choices] == ["image", "video"]
    args = ("star", "left", 2, "video_zipar", "", 2.0, 0.7, 0, False)
    clip, *_, table = last(run(*args))
    assert clip is not None and "frame 0 by the image prior" in table
    assert "frame 0 by the video prior" in last(run(*args, "video"))[-1]
    _, plain = endpoint(pipe)
    radio = next(b for b in plain.blocks.values() if getattr(b, "elem_id", None) == "video-first-frame")
    assert radio.value == "video" and [v for _, v in radio.choices] == ["video"]
