"""PDFs read as their users expect: a page's text layer where it has one, OCR where it has none
(document/pdf_text.py, document.reader.pdf_pages, `python -m document --ocr`)."""
import json
import time
import zlib

import pytest
from PIL import Image, ImageDraw, ImageFont

import document
from document import data
from document.bench import cer

LINES = ["Invoice 2026-0117 for parallel decoding", "Total due: 1,284.50 EUR by 31 January",
         "Questions? Write to billing@example.org"]
PAGE_PT = (612, 792)                       # US letter


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF file of the numbered objects (1..n; object 1 the catalog), with its xref table."""
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _stream(content: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s>>\nstream\n" % (len(content), extra) + content + b"\nendstream"


def typed_pdf(path, lines, image: Image.Image | None = None):
    """A born-digital page: the lines in Helvetica 14 pt (a text layer), and optionally a grayscale
    image placed below them (text drawn in pixels only, as a pasted scan)."""
    ops = [b"BT /F1 14 Tf 72 %d Td (%s) Tj ET" % (700 - 28 * i, line.encode()) for i, line in enumerate(lines)]
    resources = b"/Font << /F1 4 0 R >>"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", b"",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    if image is not None:
        g = image.convert("L")
        w_pt, h_pt = g.width * 72 / 200, g.height * 72 / 200             # placed at 200 dpi
        ops.append(b"q %.2f 0 0 %.2f 72 300 cm /Im1 Do Q" % (w_pt, h_pt))
        resources += b" /XObject << /Im1 6 0 R >>"
    content = b"\n".join(ops)
    objects[2] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << %s >> /Contents 5 0 R >>"
                  % (PAGE_PT[0], PAGE_PT[1], resources))
    objects.append(_stream(content))
    if image is not None:
        objects.append(_stream(zlib.compress(g.tobytes()), b"/Type /XObject /Subtype /Image /Width %d /Height %d "
                               b"/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode " % g.size))
    path.write_bytes(_pdf(objects))
    return path


def layer_text(path) -> list[str]:
    """The page's text as pypdf (another library than the reader's pypdfium2) extracts it."""
    from pypdf import PdfReader
    return [" ".join(t.split()) for t in PdfReader(str(path)).pages[0].extract_text().splitlines() if t.strip()]


def scanned_pdf(src, dst, dpi=200):
    """The page rasterised into an image-only PDF (no text layer), as a scanner writes it."""
    import pypdfium2 as pdfium
    doc = pdfium.PdfDocument(str(src))
    doc[0].render(scale=dpi / 72).to_pil().convert("RGB").save(dst, resolution=dpi)
    doc.close()
    return dst


@pytest.fixture
def no_ocr(monkeypatch):
    """Loading the OCR model fails: a page read from its text layer never needs it."""
    import document.ocr

    def refuse(*a, **k):
        raise AssertionError("the OCR model was loaded for a page with a text layer")
    monkeypatch.setattr(document.ocr, "load_ocr", refuse)


def test_born_digital_page_is_read_from_its_text_layer(tmp_path, no_ocr):
    pdf = typed_pdf(tmp_path / "typed.pdf", LINES)
    document.read(pdf)                                             # first call imports pypdfium2
    t0 = time.perf_counter()
    pages = document.read(pdf)
    seconds = time.perf_counter() - t0
    print(f"text-layer page read in {seconds * 1000:.1f} ms")       # the target: under 0.1 s
    (page,) = pages
    assert [line.text for line in page.lines] == LINES
    assert cer(["\n".join(line.text for line in page.lines)], ["\n".join(layer_text(pdf))]) == 0
    assert {line.source for line in page.lines} == {"text_layer"}
    assert (page.width, page.height) == (1700, 2200)               # 612 x 792 pt at 200 dpi
    for i, line in enumerate(page.lines):                           # 14 pt text 28 pt apart, from y = 700 pt
        x0, y0, x1, y1 = line.box
        baseline = (PAGE_PT[1] - 700 + 28 * i) * 200 / 72
        assert abs(x0 - 200) <= 6 and y0 < baseline <= y1 + 2 and 25 <= y1 - y0 <= 60
        assert x1 - x0 > 0.4 * 14 * len(LINES[i]) * 200 / 72 * 0.5


def test_the_same_page_scanned_is_read_by_the_recogniser(tmp_path, ocr):
    pdf = typed_pdf(tmp_path / "typed.pdf", LINES)
    scan = scanned_pdf(pdf, tmp_path / "scan.pdf")
    assert not "".join(layer_text(scan))                             # no text layer left
    (page,) = document.read(scan, ocr=ocr)
    assert {line.source for line in page.lines} == {"ocr"}
    assert len(page.lines) == len(LINES)
    assert cer(["\n".join(line.text for line in page.lines)], ["\n".join(LINES)]) < 0.05
    (empty,) = document.read(scan, ocr=ocr, ocr_mode="never")
    assert empty.lines == [] and empty.width == 1700


def test_ocr_always_reads_the_pixels_of_a_typed_page(tmp_path, ocr):
    pdf = typed_pdf(tmp_path / "typed.pdf", LINES)
    (page,) = document.read(pdf, ocr=ocr, ocr_mode="always")
    assert {line.source for line in page.lines} == {"ocr"}
    assert cer(["\n".join(line.text for line in page.lines)], ["\n".join(LINES)]) < 0.05


def test_an_image_on_a_typed_page_is_read_by_ocr(tmp_path, ocr):
    font = ImageFont.truetype(data.font_paths()[0], 40)
    pasted = Image.new("L", (1000, 80), 255)
    ImageDraw.Draw(pasted).text((20, 15), "Signed copy 2026", font=font, fill=0)
    pdf = typed_pdf(tmp_path / "mixed.pdf", LINES, image=pasted)
    (page,) = document.read(pdf, ocr=ocr)
    assert [line.text for line in page.lines if line.source == "text_layer"] == LINES
    (scanned,) = [line for line in page.lines if line.source == "ocr"]
    assert cer([scanned.text], ["Signed copy 2026"]) < 0.15
    assert scanned.box[1] > page.lines[len(LINES) - 1].box[3]      # below the typed lines, in page pixels
    (layer_only,) = document.read(pdf, ocr=ocr, ocr_mode="never")
    assert [line.source for line in layer_only.lines] == ["text_layer"] * len(LINES)


def test_bad_ocr_mode_is_refused_with_the_choices(tmp_path):
    pdf = typed_pdf(tmp_path / "typed.pdf", LINES)
    with pytest.raises(ValueError, match="auto, never, always"):
        document.read(pdf, ocr_mode="sometimes")


def test_cli_writes_each_lines_source(tmp_path, capsys):
    from document.__main__ import main
    pdf = typed_pdf(tmp_path / "typed.pdf", LINES)
    out = tmp_path / "out"
    assert main([str(pdf), "--out", str(out)]) == 0, capsys.readouterr()
    lines = json.loads((out / "typed.pdf.json").read_text())["pages"][0]["lines"]
    assert [(x["text"], x["source"]) for x in lines] == [(t, "text_layer") for t in LINES]
    assert (out / "typed.pdf.txt").read_text().split("\n")[:3] == LINES
    with pytest.raises(SystemExit) as bad:
        main([str(pdf), "--out", str(out), "--ocr", "sometimes"])
    assert bad.value.code == 2 and "--ocr" in capsys.readouterr().err


def test_the_text_layer_bench_scores_layer_and_scan(tmp_path, ocr):
    from document import bench_layer
    pdf = typed_pdf(tmp_path / "typed.pdf", LINES)
    rows = {r["reader"]: r for r in bench_layer.run(ocr, [str(pdf)], 1, 200)}
    layer, scan = rows["born-digital, --ocr auto (text layer)"], rows["scanned (image-only PDF), --ocr auto"]
    assert (layer["CER"], layer["words"], layer["text-layer lines"], layer["lines"]) == ("0.00%", "100.0%", "100%", 3)
    assert scan["text-layer lines"] == "0%" and float(scan["CER"][:-1]) < 5


def test_a_rotated_page_boxes_its_layer_lines_where_they_are_drawn(tmp_path, no_ocr):
    from pypdf import PdfWriter
    typed_pdf(tmp_path / "typed.pdf", LINES)
    w = PdfWriter(clone_from=str(tmp_path / "typed.pdf"))
    w.pages[0].rotate(90)
    w.write(str(tmp_path / "rotated.pdf"))
    (page,) = document.read(tmp_path / "rotated.pdf")
    assert (page.width, page.height) == (2200, 1700) and sorted(line.text for line in page.lines) == sorted(LINES)
    image = page.picture().convert("L")
    for line in page.lines:
        x0, y0, x1, y1 = line.box
        assert y1 - y0 > 8 * (x1 - x0)                                  # the lines run down the rotated page
        assert min(image.crop(line.box).getdata()) < 100                # and their ink is inside each box
