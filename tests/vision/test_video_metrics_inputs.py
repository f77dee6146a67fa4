"""The video bench scores decoded clips (PIL frames) and real clips (arrays) alike."""
import numpy as np
from PIL import Image

from vision.metrics import as_uint8_array
from vision.video.metrics import clips_tensor


def test_frames_as_arrays_or_pil_images_give_the_same_tensor():
    rng = np.random.default_rng(0)
    clip = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    as_pil = [[Image.fromarray(f) for f in clip]]
    assert np.array_equal(as_uint8_array(list(clip)), as_uint8_array(as_pil[0]))
    assert clips_tensor([list(clip)]).equal(clips_tensor(as_pil))
    assert clips_tensor([list(clip)]).equal(clips_tensor(clip[None]))
