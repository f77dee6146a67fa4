"""The video data, pipeline and files: procedural clips (fixed, disjoint splits; the motions
move as named), VideoPipeline over a tiny random video prior and the shipped VQ tokenizer
(shapes, stream = call, CFG, bad input), MP4/GIF through PyAV, and the shipped video weights."""
import os

import numpy as np
import pytest
import torch

from vision.video import data as vdata

WEIGHTS = os.path.join(os.path.dirname(__file__), "..", "..", "vision", "weights")


def test_clips_are_fixed_and_the_splits_disjoint():
    a, la, ma = vdata.make_clips("test", 1, frames=3)
    b, lb, mb = vdata.make_clips("test", 1, frames=3)
    c, _, _ = vdata.make_clips("train", 1, frames=3)
    assert a.shape == (len(vdata.PAIRS), 3, vdata.SIZE, vdata.SIZE, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and np.array_equal(la, lb) and np.array_equal(ma, mb)
    assert not any(np.array_equal(x[0], y[0]) for x in a for y in c)
    assert sorted(set(zip(la.tolist(), ma.tolist()))) == sorted(vdata.PAIRS)


def _centroid(frame: np.ndarray) -> np.ndarray:
    """Centre of the pixels that differ from the corner colour (the background)."""
    fg = np.abs(frame.astype(int) - frame[0, 0].astype(int)).sum(-1) > 60
    ys, xs = fg.nonzero()
    return np.array([xs.mean(), ys.mean()])


@pytest.mark.parametrize("motion, direction", [("left", (-1, 0)), ("right", (1, 0)), ("up", (0, -1)), ("down", (0, 1))])
def test_moves_shift_the_shape_by_step_pixels_a_frame(motion, direction):
    clip = vdata.draw_clip(0, vdata.MOTIONS.index(motion), np.random.default_rng(3))      # a circle
    shift = (_centroid(clip[-1]) - _centroid(clip[0])) / (len(clip) - 1)
    assert np.allclose(shift, np.array(direction) * vdata.STEP, atol=0.5)


def test_grow_and_rotate_change_the_shape():
    grow = vdata.draw_clip(1, vdata.MOTIONS.index("grow"), np.random.default_rng(0))       # a square
    area = [(np.abs(f.astype(int) - f[0, 0].astype(int)).sum(-1) > 60).sum() for f in grow]
    assert all(b > a for a, b in zip(area, area[1:]))
    turn = vdata.draw_clip(1, vdata.MOTIONS.index("rotate"), np.random.default_rng(0))
    assert np.abs(turn[-1].astype(int) - turn[0]).mean() > 2


def test_invisible_pairs_are_refused():
    with pytest.raises(ValueError, match="cannot show"):
        vdata.draw_clip(vdata.CLASSES.index("circle"), vdata.MOTIONS.index("rotate"), np.random.default_rng(0))


@pytest.fixture(scope="module")
def pipe():
    """A tiny random video prior (2 frames) behind the real tokenizer (256 codes)."""
    from vision.tokenizer import VQTokenizer
    from vision.video.pipeline import VideoPipeline
    from vision.video.prior import VideoLayout, VideoPrior, build_video_prior
    meta = {"codebook_size": 256, "classes": list(vdata.CLASSES), "motions": list(vdata.MOTIONS), "frames": 2,
            "grid": [16, 16], "radius": 1}
    torch.manual_seed(0)
    model = build_video_prior(VideoLayout.from_meta(meta), hidden=32, layers=2, heads=4).eval()
    return VideoPipeline(VQTokenizer.load(os.path.join(WEIGHTS, "tokenizer")), VideoPrior(model, meta))


def test_pipeline_returns_frames_codes_and_stats(pipe):
    res = pipe(["star", 2], motion=["left", "grow"], num_frames=2, decoder="diagonal", seed=0)
    assert res.tokens.shape == (2, 2, 16, 16) and len(res.clips) == 2
    assert all(f.size == (64, 64) for clip in res.clips for f in clip)
    assert res.labels == [3, 2] and res.motions == [0, 5]
    assert res.stats.num_forwards < 2 * 256
    with pytest.raises(ValueError, match="res.clips"):
        res.frames
    one = pipe("star", motion="left", num_frames=2, decoder="diagonal", seed=0)
    assert one.codes.shape == (2, 16, 16) and len(one.frames) == 2


def test_stream_yields_each_frame_once_complete(pipe):
    res = pipe(["ring", "cross"], motion="down", num_frames=2, decoder="video_zipar", seed=4)
    frames = list(pipe.stream(["ring", "cross"], motion="down", num_frames=2, decoder="video_zipar", seed=4))
    assert sorted((f.clip, f.index) for f in frames) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for f in frames:
        assert torch.equal(f.codes, res.tokens[f.clip, f.index])
        diff = np.abs(np.asarray(f.image, dtype=int) - np.asarray(res.clips[f.clip][f.index]))
        assert diff.max() <= 2          # the VQ decoder on one frame vs a batch: float round-off
    first = {(f.clip, f.index): f.forward for f in frames}
    assert first[(0, 0)] < first[(0, 1)]
    assert len({id(f.stats) for f in frames}) == len(frames)          # each frame's own snapshot
    assert [f.stats.num_forwards for f in frames] == sorted(f.stats.num_forwards for f in frames)
    assert frames[-1].stats.num_forwards == res.stats.num_forwards


def test_exact_decoders_agree_greedy_under_cfg(pipe):
    ar = pipe("digit_7", motion="rotate", num_frames=2, decoder="ar", temperature=0.0, top_k=None)
    for decoder in ("sjd", "diagonal", "video_zipar_sjd"):
        out = pipe("digit_7", motion="rotate", num_frames=2, decoder=decoder, temperature=0.0, top_k=None)
        assert torch.equal(out.tokens, ar.tokens), decoder


def test_first_frame_from_the_image_prior(pipe):
    """first_frame="image": frame 0 is the image prior's draw (ar; zipar under video_zipar), the video
    prior continues from it, and an exact decoder still gives ar's clip."""
    from vision.prior import ImagePrior
    from vision.video.pipeline import VideoPipeline
    both = VideoPipeline(pipe.tokenizer, pipe.prior, ImagePrior.load(os.path.join(WEIGHTS, "prior")))
    alone = both.image("star", decoder="ar", seed=5)
    res = both("star", motion="left", num_frames=2, decoder="ar", seed=5, first_frame="image")
    assert res.tokens.shape == (1, 2, 16, 16) and torch.equal(res.tokens[0, 0], alone.tokens[0])
    assert res.stats.num_forwards > alone.stats.num_forwards and res.settings["first_frame"] == "image"
    assert res.stats.steps_per_row() == [res.stats.num_forwards]
    greedy = {"motion": "up", "num_frames": 2, "first_frame": "image", "temperature": 0.0, "top_k": None}
    ar = both(["ring", "cross"], decoder="ar", **greedy)
    assert torch.equal(both(["ring", "cross"], decoder="diagonal", **greedy).tokens, ar.tokens)
    zipar = both("star", motion="left", num_frames=2, decoder="video_zipar", seed=5, first_frame="image")
    assert torch.equal(zipar.tokens[0, 0], both.image("star", decoder="zipar", seed=5).tokens[0])
    one = both("star", num_frames=1, seed=5, first_frame="image")
    assert torch.equal(one.tokens[0, 0], alone.tokens[0]) and one.settings["num_frames"] == 1
    with pytest.raises(ValueError, match="needs the image prior"):
        pipe("star", num_frames=1, first_frame="image")
    with pytest.raises(ValueError, match="unknown first_frame"):
        both("star", num_frames=1, first_frame="last")


def test_frame_0_from_the_image_prior_is_the_default_and_streams(pipe):
    """Where an image prior is present it draws frame 0 by default, in __call__ and in stream() alike (the
    stream's frames, forwards and stats continue from the image's); without one, the video prior does."""
    from vision.prior import ImagePrior
    from vision.video.pipeline import VideoPipeline
    both = VideoPipeline(pipe.tokenizer, pipe.prior, ImagePrior.load(os.path.join(WEIGHTS, "prior")))
    args = dict(motion="left", num_frames=2, decoder="video_zipar", seed=5)      # frame 0 by zipar: few forwards
    res = both(["star", "ring"], **args)
    assert res.settings["first_frame"] == "image"
    frames = list(both.stream(["star", "ring"], **args))
    assert sorted((f.clip, f.index) for f in frames) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for f in frames:
        assert torch.equal(f.codes.cpu(), res.tokens[f.clip, f.index].cpu())
        assert int(f.decided_at.min()) >= 1 and int(f.decided_at.max()) == f.forward
    last = max(frames, key=lambda f: f.forward)
    assert last.stats.num_forwards == last.forward == res.stats.num_forwards
    assert [f.index for f in both.stream("star", num_frames=1, decoder="video_zipar", seed=5)] == [0]
    assert pipe("star", **args).settings["first_frame"] == "video"          # no image prior: the video prior's
    assert torch.equal(pipe("star", **args).tokens, pipe("star", first_frame="video", **args).tokens)
    with pytest.raises(ValueError, match="needs the image prior"):
        next(pipe.stream("star", first_frame="image", **args))


def test_bad_input_is_a_clear_error(pipe):
    with pytest.raises(ValueError, match="num_frames must be 1..2"):
        pipe("star", motion="left", num_frames=3)
    with pytest.raises(ValueError, match="unknown motion 'spin'"):
        pipe("star", motion="spin", num_frames=1)
    with pytest.raises(ValueError, match="unknown class"):
        pipe("hexagon", motion="left", num_frames=1)
    with pytest.raises(ValueError, match="one per label"):
        pipe(["star", "ring"], motion=["left", "up", "down"], num_frames=1)
    with pytest.raises(ValueError, match="does not take"):
        pipe("star", motion="left", num_frames=1, decoder="diagonal", draft_len=3)


def test_save_writes_mp4_and_gif_that_read_back(pipe, tmp_path):
    from vision.video.io import read_video, write_video
    res = pipe("square", motion="right", num_frames=2, decoder="video_zipar", seed=1)
    mp4, gif = res.save(str(tmp_path / "sq.mp4"))[0], res.save(str(tmp_path / "sq.gif"), scale=1)[0]
    assert read_video(mp4).shape == (2, 256, 256, 3)
    back = read_video(gif)
    assert back.shape == (2, 64, 64, 3)
    assert np.abs(back.astype(int) - np.asarray(res.frames[0])[None]).mean() < 40
    with pytest.raises(ValueError, match="ending in"):
        write_video(tmp_path / "x.avi", res.frames)
    with pytest.raises(ValueError, match="no frames"):
        write_video(tmp_path / "x.mp4", [])
    (tmp_path / "bad.mp4").write_bytes(b"not a video")
    with pytest.raises(ValueError, match="cannot read"):
        read_video(tmp_path / "bad.mp4")
    assert sorted(os.listdir(tmp_path)) == ["bad.mp4", "sq.gif", "sq.mp4"]      # nothing half-written


@pytest.mark.skipif(not os.path.isdir(os.path.join(WEIGHTS, "video", "prior")), reason="no trained video prior")
def test_shipped_video_weights_load_and_carry_their_metrics():
    from suite.runtime.storage import read_json
    from vision.video.pipeline import load_video_pipeline
    pipe = load_video_pipeline()
    assert pipe.max_frames == vdata.FRAMES and pipe.motions == list(vdata.MOTIONS)
    metrics = read_json(os.path.join(WEIGHTS, "video", "prior", "metrics.json"))
    assert metrics["test_loss"] < 1.0
    motion = read_json(os.path.join(WEIGHTS, "video", "motion", "metrics.json"))
    assert motion["test_accuracy"] > 0.9
