#!/usr/bin/env bash
# The GPU recipe of the video models (vision/weights/video/README.md): the motion classifier on
# the CPU (a few minutes), then the AR video prior on one GPU, warm-started from the shipped
# image prior, with frame-aware rotary positions (vision/video/rotary.py: a cell's position is its
# frame and its place in the frame) and the motion-told copy of the previous frame
# (vision/video/motioncopy.py, --copy motion: the moves read the cell one step back, rotate and grow
# a learnt neighbourhood, mixed in by a learnt gate), trained together with the transformer here
# (on the CPU the shipped copy path was trained on the frozen transformer: --freeze-transformer).
# Each swaps its folder in under vision/weights/video/ only when complete.
#
#   vision/video/train_gpu.sh
#
# Environment: DEVICE (cuda), PYTHON (python3), MINUTES (20: the prior's wall-clock budget),
# PER_PAIR (200 training clips per visible (class, motion) pair), BATCH (16).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
$PY -m vision.video.train motion --per-pair 12 --test-per-pair 4 --minutes 6
$PY -m vision.video.train prior --device "${DEVICE:-cuda}" --per-pair "${PER_PAIR:-200}" --batch "${BATCH:-16}" \
    --positions frame --inputs none --copy motion --lr 3e-4 \
    --copy-lr-scale 20 --told-lr-scale 100 --minutes "${MINUTES:-20}" --test-per-pair 2 --save-every 5
