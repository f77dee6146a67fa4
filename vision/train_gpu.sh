#!/usr/bin/env bash
# The GPU recipe of the shipped image tokenizer and prior (vision/weights/README.md): about 8 minutes
# on one H200. Each stage swaps its folder in under vision/weights/ only when complete.
#
#   vision/train_gpu.sh [KEEP]      KEEP: copy each finished stage there too (tokenizer, prior_raster,
#                                   prior_lpd, prior)
#
# Stages: the VQ tokenizer; the raster prior; raster + LPD position queries; raster + position
# queries + ZipAR's views (vision/zipar_views.py), the shipped prior.
#
# Environment: DEVICE (cuda), PYTHON (python3), SCALE (1: multiplies every time budget),
# PER_CLASS (3000 training images per class).
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=${1:-}
PY=${PYTHON:-python3}
DEV=${DEVICE:-cuda}
N=${PER_CLASS:-3000}
minutes() { $PY -c "print($1 * ${SCALE:-1})"; }
keep() { if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp -r "vision/weights/$1" "$KEEP/$2"; fi; }

$PY -m vision.train tokenizer --device "$DEV" --per-class "$N" --batch 64 --lr 1e-3 --steps 100000 \
    --restart-every 200 --minutes "$(minutes 1.25)"
keep tokenizer tokenizer
$PY -m vision.train prior --device "$DEV" --per-class "$N" --hidden 256 --layers 8 --heads 8 \
    --batch 128 --lr 8e-4 --steps 100000 --minutes "$(minutes 2)"
keep prior prior_raster
$PY -m vision.train lpd --device "$DEV" --per-class "$N" --batch 64 --lpd-batch 32 --lr 4e-4 \
    --steps 100000 --save-every 0 --minutes "$(minutes 2)"
keep prior prior_lpd
$PY -m vision.train lpd --device "$DEV" --per-class "$N" --batch 64 --lpd-batch 32 --zipar-batch 64 \
    --zipar-window 3 --lr 4e-4 --steps 100000 --save-every 0 --minutes "$(minutes 2.5)"
keep prior prior
