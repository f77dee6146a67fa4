import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Drafts keep their fixed sizes in tests: a cost curve measured on a loaded machine would make the
# decoders' choices (and so the tests) depend on the load; the sizing tests pass their curves explicitly.
os.environ.setdefault("PARASUITE_COST", "0")
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # test helpers (tinymodels, scripted)
