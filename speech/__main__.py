"""`python -m speech` points to the speech commands."""
import sys

print(__doc__ + "\n  python -m speech.tts \"text\" --out a.wav\n  python -m speech.asr FILE_OR_FOLDER\n"
      "  python -m speech.bench\n  python -m speech.train {data,codec,asr,tts,tts-flat}", file=sys.stderr)
