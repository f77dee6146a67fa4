#!/usr/bin/env bash
# Issue 41, first GPU run (about 5 minutes on one H200): every decoder on CUDA, then each domain's
# bench in short form on the GPU. Run scripts/gpu_prepare.sh here first: it builds the carried .whl/
# and prints the exact device `run` call for this script.
#
#   scripts/gpu_check.sh                   on the GPU machine (the device tool sets $OUT)
#   DEVICE=cpu scripts/gpu_check.sh        dry run on this CPU: the same steps, tiny sizes (QUICK=1)
#
# Steps, in order of value, each under `timeout` and the whole under TOTAL_S; a failing step is
# recorded and the next one runs. Logs (one per group) and summary.md go to $OUT (7 files: the tool
# returns at most 8):
#   check.log   python3 -m apps.check --smoke --device cuda (every registered decoder at T = 0 against
#               ar and at T = 1, tiny models); SmolLM2's GGUF converted once; python3 -m apps.check
#               --device cuda: the GPU-marked tests, the smoke again, the ar step's latency eager /
#               static cache / compiled with CUDA graphs (SmolLM2 and the image prior, each checked
#               token for token against eager), each text decoder's speedup and weight bandwidth
#   text.log    text.bench --quick (one prompt per group: chat, code, grounded, EAGLE held-out) on
#               SmolLM2, every decoder against ar, batch 1 (the bench has no batch option)
#   image.log   vision.bench (image prior, every image decoder against ar), batch 1 and batch 16
#               (16 labels, one batch per seed)
#   video.log   vision.video.bench --batch 1 and --batch 16
#   ocr.log     document.bench on held-out synthetic lines (its own batches of 32), no PDF pages, no
#               engines (tesseract and rapidocr are not on the GPU machine)
#   speech.log  speech.bench: TTS (every decoder) and ASR, after building the held-out split alone
# The benches have no --device option: scripts/on_device.py moves the models their loaders return
# to DEVICE. Eager against compiled / CUDA-graph steps is in apps.check only (no bench offers it).
#
# Environment: DEVICE (cuda), PYTHON (python3), OUT, TOTAL_S (300), QUICK (0; 1 when DEVICE=cpu:
# the dry run's tiny sizes), NEW (max new tokens: 64, quick 8), BATCHES ("1 16"; quick "1 2"),
# THREADS (CPU threads of the benches' CPU parts: 8, quick 1), STEPS (all: "check text image video
# ocr speech"), WHEELS and LIMIT_SCALE (scripts/gpu_env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS_NAME="GPU check (scripts/gpu_check.sh)"
TOTAL_S=${TOTAL_S:-300}
source scripts/gpu_env.sh

QUICK=${QUICK:-$([ "$DEV" = cpu ] && echo 1 || echo 0)}
STEPS=${STEPS:-"check text image video ocr speech"}
if [ "$QUICK" = 1 ]; then
    NEW=${NEW:-8}; BATCHES=${BATCHES:-"1 2"}; THREADS=${THREADS:-1}
    TEXT_DEC=(--decoders ar ngram eagle); IMAGE_DEC=(--decoders ar zipar lpd:steps=20)
    VIDEO_DEC=(--decoders ar diagonal); LINES=4; TTS=1; ASR=2; TTS_DEC=(--tts-decoders delay stack)
else
    NEW=${NEW:-64}; BATCHES=${BATCHES:-"1 16"}; THREADS=${THREADS:-8}
    TEXT_DEC=(); IMAGE_DEC=(); VIDEO_DEC=(); LINES=200; TTS=4; ASR=40; TTS_DEC=()
fi
wants() { [[ " $STEPS " == *" $1 "* ]]; }
ONDEV=("$PY" scripts/on_device.py "$DEV")
json_to_log() { [ -f "$2" ] && { echo "--- $2"; cat "$2"; echo; } >> "$OUT/$1.log"; rm -f "$2"; }
labels() { "$PY" -c "import sys; n = int(sys.argv[1]); print(*[i % 10 for i in range(n)])" "$1"; }
read -ra BATCH_LIST <<< "$BATCHES"
first=${BATCH_LIST[0]}
rest=("${BATCH_LIST[@]:1}")

image_bench() {
    # shellcheck disable=SC2046
    step image "image bench, batch $1" "$2" "${ONDEV[@]}" vision.bench "${IMAGE_DEC[@]}" --seeds 1 --labels $(labels "$1") \
        --no-fd --threads "$THREADS" --json "$WORK/image-$1.json"
    json_to_log image "$WORK/image-$1.json"
}
video_bench() {
    step video "video bench, batch $1" "$2" "${ONDEV[@]}" vision.video.bench "${VIDEO_DEC[@]}" --clips "$1" --batch "$1" \
        --seeds 1 --no-fd --threads "$THREADS" --json "$WORK/video-$1.json"
    json_to_log video "$WORK/video-$1.json"
}

if wants check; then
    step check "decoder smoke on $DEV" 45 "$PY" -m apps.check --smoke --device "$DEV"
    step check "SmolLM2 GGUF converted once" 45 "$PY" -c "import text.model as m; print(m.ensure_converted())"
    if [ "$DEV" = cuda ]; then
        step check "apps.check on cuda" 150 "$PY" -m apps.check --device cuda --max-new-tokens "$NEW"
    else
        step check "apps.check step latency on cpu" 120 "$PY" -m apps.check --device cpu --max-new-tokens "$NEW"
    fi
fi
if wants text; then
    step text "text bench (SmolLM2, --quick)" 75 "${ONDEV[@]}" text.bench --quick --no-hf \
        --max-new-tokens "$NEW" "${TEXT_DEC[@]}"
fi
if wants image; then image_bench "$first" 20; fi
if wants video; then video_bench "$first" 40; fi
if wants ocr; then
    step ocr "OCR bench ($LINES held-out lines)" 20 "${ONDEV[@]}" document.bench --lines "$LINES" --pdf-pages 0 \
        --no-engines --threads "$THREADS"
fi
if wants speech; then
    # the bench reads the held-out split (150 utterances, flite's rms voice) from the data cache, and
    # on a miss builds every split, Piper's included: build that one split alone first
    step speech "speech held-out data (flite)" 60 "$PY" -m speech.data --splits heldout --workers "$THREADS"
    step speech "speech bench (TTS $TTS, ASR $ASR)" 30 "${ONDEV[@]}" speech.bench --tts "$TTS" --asr "$ASR" \
        "${TTS_DEC[@]}" --threads "$THREADS" --json "$WORK/speech.json"
    json_to_log speech "$WORK/speech.json"
fi
for b in "${rest[@]}"; do
    if wants image; then image_bench "$b" 20; fi
    if wants video; then video_bench "$b" 40; fi
done
finish
