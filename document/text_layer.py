"""A PDF page's text layer as the reference a reader is scored against: where each character is drawn,
and the text inside a line's box."""
from __future__ import annotations


def page_chars(page, scale: float) -> list[tuple[str, float, float]]:
    """The PDF text layer of a page: (char, x, y) per character, the centre of its glyph box in
    rendered pixels (y down)."""
    tp = page.get_textpage()
    h_pt, out = page.get_height(), []
    for i in range(tp.count_chars()):
        left, bottom, right, top = tp.get_charbox(i)
        out.append((tp.get_text_range(i, 1), (left + right) / 2 * scale, (h_pt - (bottom + top) / 2) * scale))
    return out


def text_in_box(chars, box) -> str:
    """The characters whose glyph centre lies in the box, in text order; a space where the text
    jumps (a glyph box merely touching the line, e.g. a descender of the line above, is not in)."""
    x0, y0, x1, y1 = box
    parts, last = [], None
    for i, (c, x, y) in enumerate(chars):
        if x0 <= x <= x1 and y0 <= y <= y1:
            if last is not None and i != last + 1:
                parts.append(" ")
            parts.append(c)
            last = i
    return " ".join("".join(parts).split())
