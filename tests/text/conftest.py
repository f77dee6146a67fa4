"""Fixtures for text/: the tiny random Llama of tests/conftest.py loaded, and the embedded model."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    import text
    return text.load(tiny_dir)


@pytest.fixture(scope="session")
def smol():
    """The embedded SmolLM2-135M-Instruct generator."""
    import text
    return text.load()
