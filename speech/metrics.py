"""Character error rate (Levenshtein distance over characters / reference length): suite's."""
from suite.runtime.metrics import cer, edit_distance

__all__ = ["cer", "edit_distance"]
