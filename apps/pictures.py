"""Pictures of when things were decided: forward indices on a colour ramp, with its scale bar."""
from __future__ import annotations

# a perceptual ramp (viridis anchors): early forwards dark blue, late ones yellow
RAMP = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
UNDECIDED = (200, 200, 200)


def step_colours(decided_at, forwards: int):
    """(..., ) forward indices (1-based; 0 = not decided yet) -> (..., 3) uint8 RGB on the ramp."""
    import numpy as np
    ramp = np.array(RAMP, dtype=float)
    decided_at = np.asarray(decided_at)
    t = (decided_at - 1) / max(forwards - 1, 1)                 # 0 = first forward, 1 = last
    pos = np.clip(t, 0, 1) * (len(ramp) - 1)
    lo = np.floor(pos).astype(int).clip(max=len(ramp) - 2)
    frac = (pos - lo)[..., None]
    rgb = ramp[lo] * (1 - frac) + ramp[lo + 1] * frac
    rgb[decided_at <= 0] = UNDECIDED
    return rgb.round().astype(np.uint8)


def nearest_resize(image, width: int):
    """Upscale a small PIL picture to `width` pixels wide, keeping its cells sharp."""
    from PIL import Image
    if image is None:
        return None
    return image.resize((width, max(1, round(width * image.height / image.width))), Image.NEAREST)


def font(size: int = 16):
    from PIL import ImageFont
    return ImageFont.load_default(size=size)


def with_scale_bar(picture, forwards: int, title: str = "forward"):
    """`picture` (coloured by step_colours over `forwards`) with its own colour scale below it (the
    ramp from forward 1 to `forwards`, labelled) and a blank band above it for the widget's label."""
    import numpy as np
    from PIL import Image, ImageDraw
    width, top, bar, text = picture.width, 30, 14, 22
    ramp = step_colours(np.linspace(1, max(forwards, 1), width)[None].repeat(bar, 0), forwards)
    out = Image.new("RGB", (width, top + picture.height + bar + text + 6), "white")
    out.paste(picture.convert("RGB"), (0, top))
    out.paste(Image.fromarray(ramp), (0, top + picture.height + 4))
    draw, f = ImageDraw.Draw(out), font(15)
    y = top + picture.height + bar + 6
    draw.text((0, y), f"{title} 1", fill=(20, 20, 20), font=f)
    last = f"{title} {forwards} (the last)"
    draw.text((width - draw.textlength(last, font=f), y), last, fill=(20, 20, 20), font=f)
    return out
