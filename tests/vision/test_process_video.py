"""Batch video processing (apps/process_video.py, vision/video/process.py, subtitles.py) on MP4s
rendered here with PyAV: text slides with small changes between frames and a flite voice track,
moving shapes without audio, and broken files."""
import json
import re
import string

import numpy as np
import pytest

av = pytest.importorskip("av")

SLIDES = [("Quarterly report 2026", "Revenue grew by 12 percent"),
          ("Quarterly report 2026", "Revenue grew by 14 percent"),
          ("Quarterly report 2026", "Costs fell by 3 percent")]
PER_SLIDE = 4                       # frames per slide, at FPS
FPS = 2
SPEECH = [(0.4, "The weather is nice today."), (3.4, "Please open the window.")]
SR = 16_000


# ---- test material ----------------------------------------------------------------------------

def slide_frames():
    from PIL import Image, ImageDraw, ImageFont

    from document.data import font_paths
    font = ImageFont.truetype([p for p in font_paths() if p.endswith("DejaVuSans.ttf")][0], 20)
    frames = []
    for lines in SLIDES:
        for _ in range(PER_SLIDE):
            im = Image.new("RGB", (384, 128), "white")
            draw = ImageDraw.Draw(im)
            for i, text in enumerate(lines):
                draw.text((16, 20 + 44 * i), text, font=font, fill="black")
            frames.append(np.asarray(im))
    return frames


def shape_frames(n=8):
    """A red circle moving right, a blue square moving up."""
    from PIL import Image, ImageDraw
    frames = []
    for k in range(n):
        im = Image.new("RGB", (128, 128), (235, 235, 225))
        draw = ImageDraw.Draw(im)
        x = 14 + 8 * k
        draw.ellipse((x, 40, x + 30, 70), fill=(215, 35, 35))
        draw.rectangle((80, 90 - 2 * k, 104, 114 - 2 * k), fill=(35, 75, 215))
        frames.append(np.asarray(im))
    return frames


def voice_track(seconds):
    from speech.data import synthesize
    track = np.zeros(int(seconds * SR), np.float32)
    for start, text in SPEECH:
        clip = synthesize(text, "flite:slt")
        i = int(start * SR)
        track[i:i + len(clip)] = clip[:len(track) - i]
    return track


def write_mp4(path, frames, audio=None):
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=FPS)
        video.height, video.width = frames[0].shape[:2]
        video.pix_fmt = "yuv420p"
        sound = out.add_stream("aac", rate=SR) if audio is not None else None
        if sound is not None:
            sound.layout = "mono"
        for f in frames:
            out.mux(video.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")))
        out.mux(video.encode())
        if sound is not None:
            frame = av.AudioFrame.from_ndarray(audio[None], format="flt", layout="mono")
            frame.sample_rate = SR
            out.mux(sound.encode(frame))
            out.mux(sound.encode())
    return path


def write_zero_frames(path):
    """An AVI whose header has a video stream and no frame follows."""
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=FPS)
        video.height = video.width = 64
        video.pix_fmt = "yuv420p"
        out.start_encoding()
    return path


def write_undecodable(path):
    """A valid MP4 container whose H.264 payload is zeroed."""
    write_mp4(path, shape_frames(4))
    data = bytearray(path.read_bytes())
    start, end = data.index(b"mdat") + 4, data.index(b"moov")
    if end < start:
        end = len(data)
    data[start:end] = bytes(end - start)
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("videos")
    frames = slide_frames()
    write_mp4(root / "slides.mp4", frames, voice_track(len(frames) / FPS))
    write_mp4(root / "shapes.mp4", shape_frames())
    return root


@pytest.fixture(scope="module")
def worker():
    import torch

    from apps.process_video import VideoWorker
    torch.set_num_threads(1)
    return VideoWorker(fps=FPS, detector="projection", phrase="the red circle", compare_ar=True)


@pytest.fixture(scope="module")
def slides(worker, videos):
    out = worker({"src": str(videos / "slides.mp4")})
    return out, json.loads(out["json"])


def normal(text):
    return " ".join(text.lower().translate(str.maketrans("", "", string.punctuation)).split())


# ---- temporal drafts: exact, fewer forwards -----------------------------------------------------

def test_temporal_ocr_equals_frame_by_frame_ar_with_4x_fewer_forwards(slides):
    from suite.runtime.metrics import cer
    _, report = slides
    ocr = report["ocr"]
    assert ocr["decoder"] == "ngram_prior" and len(report["frames"]) == len(SLIDES) * PER_SLIDE
    assert ocr["ar"]["identical"], "temporal drafts changed the text read"
    print(f"\nOCR forwards over {len(report['frames'])} frames: temporal {ocr['forwards']} vs ar {ocr['ar']['forwards']} "
          f"({ocr['ar']['forwards_ratio']:.2f}x fewer); per line {ocr['line_forwards']} vs {ocr['ar']['line_forwards']} "
          f"({ocr['ar']['line_forwards_ratio']:.2f}x)")
    assert ocr["ar"]["forwards_ratio"] >= 4.0 and ocr["ar"]["line_forwards_ratio"] >= 4.0
    truth = ["\n".join(lines) for lines in SLIDES for _ in range(PER_SLIDE)]
    assert cer(truth, [f["text"] for f in report["frames"]]) < 0.1
    assert all(f["lines"] and len(f["lines"][0]["box"]) == 4 for f in report["frames"])


def test_grounding_drafted_by_the_last_box_equals_ar(worker, videos):
    report = json.loads(worker({"src": str(videos / "shapes.mp4")})["json"])
    g = report["grounding"]
    assert g["decoder"] == "ngram_prior" and g["ar"]["identical"]
    assert g["forwards"] <= g["ar"]["forwards"]
    lefts = [f["boxes"][0][0] for f in report["frames"] if f["boxes"]]
    assert len(lefts) >= 6 and lefts[-1] - lefts[0] > 30           # it follows the circle moving right
    assert report["subtitles"] == "screen" and "speech" not in report
    assert any("no audio track" in n for n in report["notes"])


def test_static_frames_cost_one_forward_each(worker):
    from apps.process_video import TextReader, detect_lines
    crops = detect_lines(slide_frames()[0], "projection")
    reader = TextReader(worker.ocr, True, 32)
    rows = [reader(crops) for _ in range(3)]
    assert rows[0]["forwards"] > 10 and [r["forwards"] for r in rows[1:]] == [1, 1]
    assert rows[1]["lines"] == rows[2]["lines"] == rows[0]["lines"]


def test_aligned_prior_drafts_past_a_changed_digit(worker):
    """ngram_prior's aligned fallback: after "12" became "14" the prior's " percent" still drafts."""
    import suite
    from apps.process_video import detect_lines, reading_pieces
    before = [crop for _, crop in detect_lines(slide_frames()[0], "projection")]
    after = [crop for _, crop in detect_lines(slide_frames()[PER_SLIDE], "projection")]
    cut, prior_cut = reading_pieces(worker.ocr, after), reading_pieces(worker.ocr, before)
    pieces, prior_pieces = cut.images, prior_cut.images
    assert cut.owner == prior_cut.owner
    prior = worker.ocr(prior_pieces, decoder="ar").texts
    ar = worker.ocr(pieces, decoder="ar")
    runs = {aligned: worker.ocr(pieces, decoder=suite.make_decoder("ngram_prior", num_draft=32, aligned=aligned),
                                prior_texts=prior) for aligned in (True, False)}
    assert prior != ar.texts and all(r.texts == ar.texts for r in runs.values())
    assert runs[True].stats.row_forwards < runs[False].stats.row_forwards < ar.stats.row_forwards


def test_piece_priors_follow_lines_by_place():
    from vision.video.process import piece_priors
    previous = [((0, 0, 100, 20), "top line", ["top line"]), ((0, 30, 200, 50), "long one here", ["long one", "here"])]
    assert piece_priors([0, 1], [(0, 0, 10, 10)] * 2, None) == ["", ""]
    # line 0 moved down onto the old second line (cut in 2 pieces, now 2 again); line 1 is new
    owner, boxes = [0, 0, 1], [(0, 31, 200, 51), (0, 90, 50, 110)]
    assert piece_priors(owner, boxes, previous) == ["long one", "here", "top line long one here"]
    assert piece_priors([0], [(0, 31, 200, 51)], previous) == ["long one here"]     # now read whole


# ---- subtitles ----------------------------------------------------------------------------------

SRT_BLOCK = re.compile(r"(\d+)\n(\d\d:\d\d:\d\d,\d{3}) --> (\d\d:\d\d:\d\d,\d{3})\n(.+?)\n", re.S)


def srt_seconds(stamp):
    h, m, rest = stamp.split(":")
    s, ms = rest.split(",")
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def test_speech_subtitles_at_the_asr_usual_cer(slides, worker):
    from speech.data import synthesize
    from suite.runtime.metrics import cer
    out, report = slides
    assert report["subtitles"] == "speech"
    blocks = SRT_BLOCK.findall(out["srt"])
    assert [int(b[0]) for b in blocks] == list(range(1, len(SPEECH) + 1))
    assert out["srt"].count("\n\n") == len(blocks) - 1
    times = [(srt_seconds(a), srt_seconds(b)) for _, a, b, _ in blocks]
    for (start, end), (spoken_at, _) in zip(times, SPEECH):
        assert start < end <= report["duration_s"] and abs(start - spoken_at) < 0.5
    refs = [normal(t) for _, t in SPEECH]
    video_cer = cer(refs, [normal(b[3]) for b in blocks])
    decoder = report["speech"]["decoder"]                                  # the same reader, on the clean clips
    alone_cer = cer(refs, [normal(worker.asr(synthesize(t, "flite:slt"), SR, decoder=decoder).text) for _, t in SPEECH])
    print(f"\nsubtitle CER {video_cer:.3f} (the same ASR on the clean clips: {alone_cer:.3f})")
    assert video_cer <= alone_cer + 0.1


def test_srt_format_and_cues():
    from vision.video.subtitles import Cue, screen_cues, srt_time, to_srt, voiced_segments
    assert srt_time(3723.4567) == "01:02:03,457" and srt_time(0) == "00:00:00,000"
    assert to_srt([Cue(0, 1.5, "Hello"), Cue(1.5, 2, " "), Cue(2, 3, "two\nlines")]) == \
        "1\n00:00:00,000 --> 00:00:01,500\nHello\n\n2\n00:00:02,000 --> 00:00:03,000\ntwo\nlines\n"
    spans = [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert screen_cues(spans, ["a", "a", "", "b"]) == [Cue(0, 2, "a"), Cue(3, 4, "b")]
    t = np.arange(SR * 4) / SR
    audio = np.where((t > 0.5) & (t < 1.2) | (t > 2.5) & (t < 3.0), np.sin(2 * np.pi * 300 * t), 0).astype(np.float32)
    segs = voiced_segments(audio, SR)
    assert len(segs) == 2 and abs(segs[0][0] - 0.4) < 0.05 and abs(segs[1][1] - 3.1) < 0.05
    assert len(voiced_segments(np.tile(audio, 10), SR, max_s=0.3)) > 20   # long stretches are cut
    assert voiced_segments(np.zeros(SR, np.float32), SR) == []


# ---- bad input, the batch, resume -------------------------------------------------------------

def test_bad_videos_are_clear_errors(tmp_path, videos):
    from vision.video.process import read_clip
    (tmp_path / "notes.mp4").write_text("not a video\n" * 20)
    (tmp_path / "empty.mp4").write_bytes(b"")
    cases = {"notes.mp4": "not a video FFmpeg can read", "empty.mp4": "empty (0 bytes)",
             "zero.avi": "zero frames", "broken.mp4": "cannot be decoded"}
    write_zero_frames(tmp_path / "zero.avi")
    write_undecodable(tmp_path / "broken.mp4")
    for name, words in cases.items():
        with pytest.raises(ValueError, match=re.escape(words)):
            read_clip(tmp_path / name)
    with pytest.raises(ValueError, match="fps"):
        read_clip(videos / "shapes.mp4", fps=0)
    clip = read_clip(videos / "shapes.mp4", fps=1, max_frames=3)
    assert clip.audio is None and len(clip.frames) == 3 and clip.times == [0.0, 1.0, 2.0]


def test_batch_goes_on_past_bad_files_and_resumes(tmp_path, videos, capsys):
    from apps.process_video import main
    src, out = tmp_path / "in", tmp_path / "out"
    (src / "sub").mkdir(parents=True)
    (src / "shapes.mp4").write_bytes((videos / "shapes.mp4").read_bytes())
    (src / "sub" / "slides.mp4").write_bytes((videos / "slides.mp4").read_bytes())
    (src / "text.mp4").write_text("hello\n" * 50)
    write_zero_frames(src / "zero.avi")
    (src / "readme.txt").write_text("not picked: not a video suffix")
    args = [str(src), "--out", str(out), "--fps", "2", "--max-frames", "3", "--detector", "projection"]
    assert main(args) == 1
    rows = {r["input"].split("/")[-1]: r for r in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
    assert set(rows) == {"shapes.mp4", "slides.mp4", "text.mp4", "zero.avi"}
    assert rows["shapes.mp4"]["status"] == rows["slides.mp4"]["status"] == "ok"
    assert "not a video" in rows["text.mp4"]["message"] and "zero frames" in rows["zero.avi"]["message"]
    report = json.loads((out / "sub" / "slides.mp4.json").read_text())
    assert len(report["frames"]) == 3 and report["subtitles"] == "speech"
    assert SRT_BLOCK.match((out / "sub" / "slides.mp4.srt").read_text())
    assert (out / "shapes.mp4.srt").exists() and not (out / "text.mp4.json").exists()
    assert not [p for p in out.rglob("*") if p.name.startswith(".")], "a temporary file was left behind"
    stamp = (out / "shapes.mp4.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(args) == 1                                   # the bad files fail again, the rest is skipped
    assert (out / "shapes.mp4.json").stat().st_mtime_ns == stamp
    assert "2 skipped, 2 failed" in capsys.readouterr().err
    assert main(args[:1] + ["--out", str(tmp_path / "o2"), "--asr", "on", "--no-ocr", "--max-frames", "1"]) == 1
    rows = {r["input"].split("/")[-1]: r for r in map(json.loads, (tmp_path / "o2" / "manifest.jsonl").read_text().splitlines())}
    assert "no audio track" in rows["shapes.mp4"]["message"] and "--asr auto" in rows["shapes.mp4"]["message"]
    assert rows["slides.mp4"]["status"] == "ok"


def test_cli_refuses_bad_arguments(tmp_path, capsys):
    from apps.process_video import main
    assert main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no videos" in capsys.readouterr().err
    assert main([str(tmp_path), "--out", str(tmp_path / "o"), "--no-ocr", "--asr", "off"]) == 2
    assert "nothing to do" in capsys.readouterr().err
