"""The Image tab in a real browser: an image filled in by a parallel decoder, with the heatmap of
when each token was decided, and the same decode as the library. (The compare-with-AR switch is
exercised on the Text and Document tabs: ar over 256 image tokens would double this test.)"""
import pytest


@pytest.fixture(scope="module")
def image_pipe(require_tab):
    require_tab("Image")
    import vision
    return vision.load_image_pipeline()


def test_image_tab_generates_like_the_library(open_app, require_tab, image_pipe, screenshot):
    require_tab("Image")
    from apps.image import DEFAULT_DECODER, UI_DEFAULTS, sampling_defaults
    label = image_pipe.classes[0]
    shown = sampling_defaults(image_pipe)           # what the sliders start at
    want = image_pipe([label], decoder=DEFAULT_DECODER, guidance_scale=shown["guidance_scale"],
                      temperature=shown["temperature"], seed=0, **UI_DEFAULTS.get(DEFAULT_DECODER, {}))
    h, w = image_pipe.grid

    page = open_app()
    page.get_by_role("tab", name="Image").click()
    page.locator("#image-run").click()
    row = page.locator(f"#image-stats tr[data-decoder='{DEFAULT_DECODER}'][data-state='done']")
    row.wait_for()
    stat = lambda key: row.locator(f"td[data-stat='{key}']").inner_text()   # noqa: E731
    assert int(stat("tokens")) == h * w
    assert int(stat("forwards")) == want.stats.num_forwards < h * w     # same decode as the library, parallel
    page.locator("#image-output img").wait_for()
    page.locator("#image-steps img").wait_for()                         # the heatmap of decided steps
    screenshot(page, "app-image.png")

    page = open_app()                                                   # bad input: a readable message
    page.get_by_role("tab", name="Image").click()
    page.locator("#image-options textarea, #image-options input").first.fill("window=wide")
    page.locator("#image-run").click()
    page.get_by_text("option window must be an integer, got 'wide'").first.wait_for()
    assert "Traceback" not in page.locator("body").inner_text()
