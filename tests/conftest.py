import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # test helpers (tinymodels, scripted)
