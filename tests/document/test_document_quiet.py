"""A document run prints no library warning meant for someone else's code: our OCR decoder's padded
rows are masked by the decode loop, so transformers' "pass an attention_mask" note does not apply."""
import logging

from PIL import Image, ImageDraw

from document import data


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_reading_a_page_prints_no_attention_mask_warning(ocr):
    from transformers.utils import logging as hf_logging

    from document.reader import read
    page = Image.new("RGB", (900, 300), "white")
    draw = ImageDraw.Draw(page)
    for i, text in enumerate(["Invoice No. 4711", "Total: $12.50", "Paid"]):
        draw.text((30, 30 + 60 * i), text, font=data._font(data.font_paths()[0], 28), fill="black")
    logging.Logger.warning_once.cache_clear()           # transformers warns once a process: let it warn again
    seen = Collect()
    hf_logging.get_logger("transformers").addHandler(seen)
    try:
        assert len(read(page, ocr=ocr, decoder="ar")[0].lines) == 3
    finally:
        hf_logging.get_logger("transformers").removeHandler(seen)
    assert not [m for m in seen.messages if "attention_mask" in m], seen.messages
