"""parasuite document: OCR of text lines with block-diffusion decoding, page reading, batch jobs.

    import document
    ocr = document.load_ocr()
    res = ocr(line_images, decoder="block_diffusion")     # res.texts, res.stats
    pages = document.read("scan.pdf")                     # pages of lines with boxes, text, confidence
"""


def load_ocr(*args, **kwargs):
    from .ocr import load_ocr as _load
    return _load(*args, **kwargs)


def read(*args, **kwargs):
    from .reader import read as _read
    return _read(*args, **kwargs)


__all__ = ["load_ocr", "read"]
