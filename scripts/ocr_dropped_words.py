"""Words the OCR drops on PDFs, and how sure it was of those lines (issue 40, finding 7).

    python scripts/man_page_pdfs.py /tmp/man && python scripts/ocr_dropped_words.py /tmp/man/*.pdf

Per PDF, its first two pages: rapidocr's line boxes, the text layer inside each box as the truth,
our OCR (`ar`, scored); prints each line that lost words (words of the truth missing from the
reading) with its confidence, then the totals and the CER per page."""
from __future__ import annotations

import difflib
import sys

import pypdfium2 as pdfium
import torch

from document.bench import ascii_truth, cer
from document.text_layer import page_chars, text_in_box
from document.ocr import load_ocr
from document.reader import line_crops


def main(paths: list[str]) -> int:
    torch.set_num_threads(1)
    ocr, words, dropped, sure = load_ocr(), 0, 0, 0
    for path in paths:
        doc = pdfium.PdfDocument(path)
        for i in range(min(2, len(doc))):
            page, scale = doc[i], 200 / 72
            image, chars = page.render(scale=scale).to_pil().convert("RGB"), page_chars(page, scale)
            crops, refs = [], []
            for box, crop in line_crops(image, "rapidocr"):
                ref = ascii_truth(text_in_box(chars, box))
                if ref:
                    crops.append(crop), refs.append(ref)
            res = ocr(crops, decoder="ar", score=True)
            for ref, hyp, conf in zip(refs, res.texts, res.confidences):
                ops = difflib.SequenceMatcher(a=ref.split(), b=hyp.split(), autojunk=False).get_opcodes()
                missing = [w for tag, a0, a1, _, _ in ops if tag == "delete" for w in ref.split()[a0:a1]]
                words, dropped, sure = words + len(ref.split()), dropped + len(missing), sure + (bool(missing) and conf > 0.9)
                if missing:
                    print(f"{path} p{i + 1} confidence {conf:.3f} missing {missing}\n  truth: {ref}\n  read:  {hyp}")
            print(f"{path} p{i + 1}: CER {100 * cer(res.texts, refs):.2f}%")
        doc.close()
    print(f"{words} words, {dropped} dropped, {sure} lines with drops at confidence > 0.9")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
