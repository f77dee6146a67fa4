#!/usr/bin/env bash
# The GPU recipe of the speech recogniser (speech/weights/README.md, "GPU recipe"): about 8 minutes
# on one H200 with 16 cores. Generates the ASR data without Piper (speech/data.py --no-piper:
# train, valid, unseen, heldout; WORKERS processes), trains a bigger recogniser from scratch on the
# GPU for MINUTES, with greedy CTC CER on valid, unseen and heldout in DEST/asr/metrics.json.
# Nothing under speech/weights/ is touched.
#
#   speech/train_gpu.sh DEST      DEST/asr/ (a weights folder for speech.load_asr and for
#                                 `python -m speech.train asr-lm / asr-gate --out`), DEST/data.log,
#                                 DEST/asr.log; the generated data in DEST/cache/
#
# Needs: flite and espeak-ng, or the folder of speech/gpu_bundle.sh in BUNDLE (its env.sh also
# brings soundfile and this repo's sentence splits); speech/weights/codec/ (codec round trips).
#
# Environment: DEVICE (cuda), PYTHON (python3), BUNDLE (.whl/speech; empty: the system's
# synthesisers and sentences), WORKERS (16), NUM_TRAIN (16000 train utterances, of 19707 sentences), MINUTES (5),
# SCALE (1: multiplies MINUTES), BATCH (64), LR (2e-3), THREADS (torch threads of the trainer, 16),
# CONFIG (ASRConfig JSON, default d_model 256, 8 encoder layers, 8.55M parameters), PHONE_AUX (0.5:
# weight of the per-frame phone loss on flite's timings; 0: none).
# CPU smoke test (about 2 minutes on one core; `valid` then has NUM_TRAIN utterances only):
# BUNDLE= DEVICE=cpu SCALE=0.01 NUM_TRAIN=64 WORKERS=1 BATCH=8 THREADS=1 \
#   CONFIG='{"d_model": 64, "enc_layers": 2, "dec_hidden": 64, "conv_kernel": 15}' speech/train_gpu.sh /tmp/asr_smoke
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:?usage: speech/train_gpu.sh DEST}
PY=${PYTHON:-python3}
BUNDLE=${BUNDLE-.whl/speech}
if [ -n "$BUNDLE" ]; then source "$BUNDLE/env.sh"; fi
mkdir -p "$DEST"
export PARASUITE_CACHE="$DEST/cache"          # a fresh data set per run, never the default cache
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
CONFIG=${CONFIG:-'{"d_model": 256, "enc_layers": 8, "heads": 4, "dec_hidden": 256, "conv_kernel": 15}'}
$PY -m speech.data --no-piper --workers "${WORKERS:-16}" --num-train "${NUM_TRAIN:-16000}" \
    --splits train heldout valid unseen > "$DEST/data.log" 2>&1
echo "data: ${SECONDS} s"
$PY -m speech.train asr --no-piper --device "${DEVICE:-cuda}" --bf16 --threads "${THREADS:-16}" \
    --batch "${BATCH:-64}" --lr "${LR:-2e-3}" --asr-config "$CONFIG" --phone-aux "${PHONE_AUX:-0.5}" --out "$DEST/asr" \
    --minutes "$($PY -c "print(${MINUTES:-5} * ${SCALE:-1})")" > "$DEST/asr.log" 2>&1
echo "data + training: ${SECONDS} s"
cat "$DEST/asr/metrics.json"
