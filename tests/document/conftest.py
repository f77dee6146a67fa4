import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def ocr():
    import torch

    import document
    torch.set_num_threads(1)
    return document.load_ocr()
