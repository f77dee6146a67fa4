"""`python -m vision.generate_video` on a tiny random video prior (2 frames) behind the shipped VQ
tokenizer: one MP4 per clip and a manifest, resume, a bad request as an error row, bad flags as
user errors naming the valid values."""
import json
import os

import numpy as np
import pytest
import torch

WEIGHTS = os.path.join(os.path.dirname(__file__), "..", "..", "vision", "weights")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A weights folder: the shipped tokenizer and a tiny random 2-frame video prior."""
    from vision.video.prior import VideoLayout, build_video_prior
    from vision.video.train import write_prior
    root = tmp_path_factory.mktemp("weights")
    os.symlink(os.path.abspath(os.path.join(WEIGHTS, "tokenizer")), root / "tokenizer")
    layout = VideoLayout(256, 10, 6, 2, 16, 16, 1)
    torch.manual_seed(0)
    write_prior(build_video_prior(layout, hidden=32, layers=2, heads=4).eval(), layout,
                str(root / "video" / "prior"), {"test_loss": None})
    return str(root)


def generate(weights, out, *args):
    from vision.generate_video import main
    return main(["--weights", weights, "--out", str(out), "--decoder", "video_zipar", "--threads", "1", *args])


def manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_two_clips_an_mp4_each_a_manifest_and_resume(weights, tmp_path, capsys):
    from vision.video.io import read_video
    out = tmp_path / "clips"
    assert generate(weights, out, "--labels", "star", "ring", "--motions", "left", "--num-frames", "1", "--gif") == 0
    m = manifest(out)
    assert m["decoder"] == "video_zipar" and m["guarantee"] == "lossy" and m["decoder_options"] == {}
    assert m["num_clips"] == m["num_done"] == 2 and m["num_failed"] == 0
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert names == ["manifest.json", "manifest.jsonl", "ring_left_000.gif", "ring_left_000.mp4",
                     "star_left_000.gif", "star_left_000.mp4"]
    clip = m["clips"][0]
    assert clip["request"] == {"label": "star", "motion": "left", "num_frames": 1, "seed": 0}
    assert clip["files"] == ["star_left_000.mp4", "star_left_000.gif"]
    assert clip["num_new_tokens"] == 256 and 0 < clip["num_forwards"] < 256        # parallel: fewer than a code each
    assert m["num_forwards"] == sum(c["num_forwards"] for c in m["clips"]) and m["wall_time_s"] > 0
    assert read_video(out / "star_left_000.mp4").shape == (1, 256, 256, 3)         # --scale 4
    assert read_video(out / "star_left_000.gif").shape == (1, 256, 256, 3)

    written = {p.name: p.stat().st_mtime_ns for p in out.glob("*.mp4")}
    capsys.readouterr()
    assert generate(weights, out, "--labels", "star", "ring", "--motions", "left", "--num-frames", "1", "--gif") == 0
    assert "0 done, 2 skipped, 0 failed" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.mp4")} == written
    assert manifest(out)["num_done"] == 2

    # another seed is another clip: regenerated, not skipped
    assert generate(weights, out, "--labels", "star", "--motions", "left", "--num-frames", "1", "--seed", "5") == 0
    assert out.joinpath("star_left_000.mp4").stat().st_mtime_ns != written["star_left_000.mp4"]
    assert manifest(out)["clips"][0]["request"]["seed"] == 5


def test_a_bad_request_is_an_error_row_and_the_batch_goes_on(weights, tmp_path, capsys):
    requests = tmp_path / "requests.txt"
    requests.write_text("# class motion frames seed\n"
                        "star left 1\n"
                        "hexagon left\n"
                        '{"label": "ring", "motion": "spin"}\n'
                        "ring up 3\n"
                        '{"label": 4, "motion": "grow", "num_frames": 1, "seed": 9}\n')
    out = tmp_path / "clips"
    assert generate(weights, out, "--input", str(requests)) == 1
    m = manifest(out)
    assert [c["status"] for c in m["clips"]] == ["ok", "error", "error", "error", "ok"]
    errors = {c["input"]: c["message"] for c in m["clips"] if c["status"] == "error"}
    assert "unknown class 'hexagon'; choose a name or id 0..9: circle, square" in errors["requests.txt:3"]
    motions = "left, right, up, down, rotate, grow"
    assert f"unknown motion 'spin'; choose a name or id 0..5: {motions}" in errors["requests.txt:4"]
    assert "num_frames must be 1..2" in errors["requests.txt:5"]
    assert m["clips"][-1]["request"] == {"label": "ring", "motion": "grow", "num_frames": 1, "seed": 9}
    assert sorted(p.name for p in out.glob("*.mp4")) == ["0002_star_left.mp4", "0006_ring_grow.mp4"]
    assert "error: requests.txt:3: unknown class 'hexagon'" in capsys.readouterr().err
    assert generate(weights, out, "--input", str(requests)) == 1            # resumed: the good ones skipped
    assert "0 done, 2 skipped, 3 failed" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--labels", "star", "--decoder", "lpd"], "unknown video decoder 'lpd'; choose one of: ar, sjd, mc_sjd, diagonal"),
    (["--labels", "hexagon"], "unknown class 'hexagon'; choose a name or id 0..9: circle"),
    (["--labels", "star", "--motions", "spin"], "unknown motion 'spin'; choose a name or id 0..5: left, right"),
    (["--labels", "star", "--num-frames", "3"], "num_frames must be 1..2 (the prior was trained on 2-frame clips)"),
    (["--labels", "star", "--num-frames", "0"], "num_frames must be 1..2"),
    (["--labels", "star", "--option", "window=wide"], "option window must be an integer, got 'wide'"),
    (["--labels", "star", "--option", "window=-1"], "option window must be an integer in [1, 4096] or none, got -1"),   # values
    (["--labels", "star", "3"], "star right #0 asked for twice"),
    (["--labels", "star", "--first-frame", "image"], "first_frame='image' needs the image prior"),
    ([], "give --labels"),
])
def test_bad_flags_are_user_errors_naming_the_valid_values(weights, tmp_path, capsys, flags, message):
    from vision.generate_video import main
    args = ["--weights", weights, "--out", str(tmp_path / "clips"), *flags]
    assert main(args if "--decoder" in flags else [*args, "--decoder", "video_zipar"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "clips").exists()                                 # nothing written


def test_stream_tells_the_forward_that_decided_each_code(weights):
    import vision
    pipe = vision.load_video_pipeline(weights)
    frames = list(pipe.stream("star", motion="left", num_frames=2, decoder="video_zipar", seed=0))
    res = pipe("star", motion="left", num_frames=2, decoder="video_zipar", seed=0)
    decided = torch.stack([f.decided_at for f in frames])                    # (T, H, W)
    assert decided.min() >= 1 and decided.max() == res.stats.num_forwards
    assert all(f.decided_at.max() <= f.forward for f in frames)              # decided before the frame completes
    assert len(np.unique(decided.numpy())) > 2                               # several forwards, several codes each
    ar = list(pipe.stream("star", motion="left", num_frames=1, decoder="ar", seed=0))
    assert ar[0].decided_at.flatten().tolist() == list(range(1, 257))        # ar: one code per forward, in raster order


def test_a_stream_and_a_call_at_once_share_forwards_and_get_their_alone_clips(weights):
    """A Video tab user's stream and a batch call at once share the prior's scheduler's forwards;
    each gets its alone clips (the stream's frames too), and a stream closed early frees its rows."""
    import threading

    import vision
    pipe = vision.load_video_pipeline(weights)
    kw = dict(num_frames=2, decoder="diagonal")
    alone_stream = pipe("star", motion="left", seed=3, **kw).tokens[0]
    alone_call = pipe(["circle", "ring"], motion="up", seed=4, guidance_scale=1.5, **kw).tokens
    scheduler = pipe.schedulers._schedulers[True]
    before = scheduler.forwards_run
    out = {}
    call = threading.Thread(target=lambda: out.update(call=pipe(["circle", "ring"], motion="up", seed=4,
                                                                 guidance_scale=1.5, **kw)))
    frames = pipe.stream("star", motion="left", seed=3, **kw)
    first = next(frames)
    call.start()
    streamed = [first] + list(frames)
    call.join()
    assert torch.equal(torch.stack([f.codes for f in streamed]), alone_stream)
    assert torch.equal(out["call"].tokens, alone_call)
    assert scheduler.forwards_run - before < streamed[-1].stats.num_forwards + out["call"].stats.num_forwards
    early = pipe.stream("star", motion="left", seed=3, **kw)
    next(early)
    early.close()                                      # the reader left: its rows leave the batch
    for _ in range(100):
        if scheduler.live_rows == 0:
            break
        threading.Event().wait(0.05)
    assert scheduler.live_rows == 0
