"""The Video tab in a real browser: video_zipar raced against ar on the embedded video prior, the
same forwards as the library, the clip playing beside its frames and per-frame heatmaps, what the
result is, and an error that clears the earlier result."""
import pytest


@pytest.fixture(scope="module")
def video_pipe(require_tab):
    require_tab("Video")
    import vision
    return vision.load_video_pipeline()


def library(video_pipe, label: str, motion: str, frames: int, decoder: str):
    from apps.video import default_options, sampling_defaults
    from suite.runtime.options import parse_options
    shown = sampling_defaults(video_pipe)            # what the sliders start at
    return video_pipe([label], motion=motion, num_frames=frames, decoder=decoder, seed=0,
                      guidance_scale=shown["guidance_scale"], temperature=shown["temperature"],
                      **parse_options(decoder, default_options(decoder)))


def test_video_tab_races_video_zipar_against_ar_like_the_library(open_app, require_tab, video_pipe, screenshot, checks):
    label, motion, frames = video_pipe.classes[3], "left", 2
    want, want_ar = (library(video_pipe, label, motion, frames, d) for d in ("video_zipar", "ar"))
    cells = frames * video_pipe.prior.layout.cells

    page = checks.open_tab(open_app, "Video")
    checks.pick(page, "video-class", label)
    checks.pick(page, "video-motion", motion)
    checks.pick(page, "video-decoder", "video_zipar")
    box = page.locator("#video-frames input[type=number]")
    box.fill(str(frames))
    box.press("Enter")
    page.locator("#video-compare input[type=checkbox]").check()
    page.locator("#video-run").click()
    for decoder in ("video_zipar", "ar"):
        page.locator(f"#video-stats tr[data-decoder='{decoder}'][data-state='done']").wait_for()
    for decoder in ("video_zipar", "ar"):
        assert int(checks.stat(page, "video", decoder, "tokens")) == cells
    assert int(checks.stat(page, "video", "video_zipar", "forwards")) == want.stats.num_forwards < cells
    assert int(checks.stat(page, "video", "ar", "forwards")) == want_ar.stats.num_forwards == cells
    for clip in ("video-output", "video-ar-output"):
        page.locator(f"#{clip} video").wait_for()
    for picture in ("video-frames-output", "video-steps", "video-ar-frames-output", "video-ar-steps"):
        page.locator(f"#{picture} img").wait_for()
    checks.says_what_it_is(page, "video", "video_zipar", compared=True)
    note = f"class {label}, motion {motion}, {frames} frames, seed 0, frame 0 by the image prior"
    assert page.locator("#video-stats .ps-note").inner_text() == note
    screenshot(page, "app-video.png")

    page.locator("#video-options textarea, #video-options input").first.fill("window=wide")   # then bad input
    page.locator("#video-run").click()
    checks.readable_error(page, "option window must be an integer, got 'wide'")
    checks.cleared(page, "video", ["#video-output video", "#video-steps img", "#video-ar-steps img"])
