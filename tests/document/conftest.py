import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def ocr():
    import torch

    import document
    torch.set_num_threads(1)
    return document.load_ocr()


@pytest.fixture(scope="session")
def vlm_folders(tmp_path_factory):
    """Tiny random page-reading VLMs (GOT-OCR2, Qwen2-VL, Florence-2) saved as users' folders."""
    import tiny_vlm
    from text.model import ensure_converted
    embedded = ensure_converted()
    return {f: tiny_vlm.BUILDERS[f](embedded, tmp_path_factory.mktemp(f)) for f in ("got_ocr2", "qwen2_vl", "florence2")}
