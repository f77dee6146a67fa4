"""The fast line finder for clean pages (document.page_lines) and the rule that picks it."""
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from document import data
from document.page_lines import clean_lines
from document.reader import line_crops

LEFT = ["The first column starts here", "with a second line of text", "and a third one, shorter."]
RIGHT = ["Another column, set beside", "the first with a wide gutter", "between them; three lines."]


def two_column_page(lead: int = 40) -> Image.Image:
    img = Image.new("RGB", (1200, 400), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(data.font_paths()[0], 24)
    for i, (a, b) in enumerate(zip(LEFT, RIGHT)):
        draw.text((40, 60 + i * lead), a, font=font, fill="black")
        draw.text((640, 60 + i * lead + 7), b, font=font, fill="black")     # not aligned with the left column
    return img


def test_two_columns_are_read_column_by_column():
    boxes = clean_lines(two_column_page())
    assert boxes is not None and len(boxes) == 6
    assert all(b[2] < 620 for b in boxes[:3]) and all(b[0] > 600 for b in boxes[3:])    # left column first
    assert [b[1] for b in boxes[:3]] == sorted(b[1] for b in boxes[:3])


def test_touching_lines_are_parted():
    img = Image.new("L", (900, 300), 255)
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(data.font_paths()[0], 30)
    for i, t in enumerate(["Eight lines of text, set solid", "yet parted by the finder", "gently and quietly.",
                           "Then one more line", "and the last one"]):
        draw.text((20, 20 + i * 31), t, font=font, fill=0)        # 31 px leading for 30 px type: rows touch
    draw.text((20, 220), "apart", font=font, fill=0)
    boxes = clean_lines(img.convert("RGB"))
    assert boxes is not None and len(boxes) == 6


def test_a_photo_like_page_goes_to_the_trained_detector():
    rng = np.random.default_rng(0)
    shade = np.linspace(90, 230, 1200)[None, :] + rng.normal(0, 20, (400, 1200))
    page = np.asarray(two_column_page().convert("L"), dtype=np.float64) * shade / 255
    img = Image.fromarray(np.clip(page, 0, 255).astype(np.uint8)).convert("RGB")
    assert clean_lines(img) is None
    assert clean_lines(two_column_page()) is not None


def test_auto_detector_uses_the_fast_finder_on_a_clean_page():
    page = two_column_page()
    found = line_crops(page, "auto")
    assert [box for box, _ in found] == clean_lines(page)
    assert all(crop.size == (b[2] - b[0], b[3] - b[1]) for b, crop in found)
