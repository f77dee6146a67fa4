"""The Image tab in a real browser: a parallel decoder raced against ar, the same decodes as the
library, each heatmap on its own scale, what the result is (lossy, its measured class accuracy, not
ar's image), an error that clears the earlier result, and three users at once."""
import pytest


@pytest.fixture(scope="module")
def image_pipe(require_tab):
    require_tab("Image")
    import vision
    return vision.load_image_pipeline()


def library(image_pipe, label: str, decoder: str):
    from apps.image import UI_DEFAULTS, sampling_defaults
    shown = sampling_defaults(image_pipe)           # what the sliders start at
    return image_pipe([label], decoder=decoder, guidance_scale=shown["guidance_scale"],
                      temperature=shown["temperature"], seed=0, **UI_DEFAULTS.get(decoder, {}))


def test_image_tab_races_zipar_against_ar_like_the_library(open_app, require_tab, image_pipe, screenshot, checks):
    label = image_pipe.classes[1]
    want, want_ar = library(image_pipe, label, "zipar"), library(image_pipe, label, "ar")
    h, w = image_pipe.grid

    page = checks.open_tab(open_app, "Image")
    checks.pick(page, "image-class", label)
    checks.pick(page, "image-decoder", "zipar")
    page.locator("#image-compare input[type=checkbox]").check()
    page.locator("#image-run").click()
    for decoder in ("zipar", "ar"):
        page.locator(f"#image-stats tr[data-decoder='{decoder}'][data-state='done']").wait_for()
    assert int(checks.stat(page, "image", "zipar", "tokens")) == int(checks.stat(page, "image", "ar", "tokens")) == h * w
    assert int(checks.stat(page, "image", "zipar", "forwards")) == want.stats.num_forwards < h * w     # parallel, as the library
    assert int(checks.stat(page, "image", "ar", "forwards")) == want_ar.stats.num_forwards
    for picture in ("image-output", "image-steps", "image-ar-output", "image-ar-steps"):
        page.locator(f"#{picture} img").wait_for()
    checks.says_what_it_is(page, "image", "zipar", compared=True)
    assert "class accuracy 96.1%" in page.locator("#image-stats .ps-quality").inner_text()
    assert page.locator("#image-stats .ps-note").inner_text() == f"class {label}, seed 0"
    screenshot(page, "app-image.png")

    page.locator("#image-options textarea, #image-options input").first.fill("window=wide")   # then bad input
    page.locator("#image-run").click()
    checks.readable_error(page, "option window must be an integer, got 'wide'")
    checks.cleared(page, "image", ["#image-output img", "#image-steps img", "#image-ar-output img"])


def test_image_tab_three_users_at_once_get_their_own_images(open_app, require_tab, image_pipe, checks):
    labels = list(image_pipe.classes[:3])
    pages = []
    for label in labels:
        page = checks.open_tab(open_app, "Image")
        checks.pick(page, "image-class", label)
        checks.pick(page, "image-decoder", "lpd")
        pages.append(page)
    for page in pages:                              # all three submitted before any finishes
        page.locator("#image-run").click()
    sources = []
    for page, label in zip(pages, labels):
        page.locator("#image-stats tr[data-decoder='lpd'][data-state='done']").wait_for()
        assert page.locator("#image-stats .ps-note").inner_text() == f"class {label}, seed 0"
        assert int(checks.stat(page, "image", "lpd", "forwards")) == library(image_pipe, label, "lpd").stats.num_forwards
        page.locator("#image-output img").wait_for()
        sources.append(page.locator("#image-output img").get_attribute("src"))
    assert len(set(sources)) == 3
