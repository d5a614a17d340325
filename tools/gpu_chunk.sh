#!/usr/bin/env bash
# One chunk of the GPU campaign of the `medium` network, in one call of at most 10 minutes
# on a lent GPU machine (no package registry; torch with CUDA, safetensors, click, numpy,
# scipy installed; amorgp runs from this checkout).
#
# Usage:  tools/gpu_chunk.sh OUTDIR [MINUTES]
#
# 1. phase 1 from the committed weights (models/medium, or $AMORGP_CHUNK_FROM), on the
#    realdata prior (AMORGP_CHUNK_PRIOR=paper and AMORGP_CHUNK_INPUTS=uniform for the paper's):
#      amorgp train --preset medium --device cuda --from models/medium --set n_max=100
#        --set num_workers=12 --set warmup_steps=100 --set prior=realdata
#        --set inputs=realistic --max-minutes MINUTES
#    (while the same machine is held, a second call continues that run bit-exactly with
#    --resume instead: the runs live in $AMORGP_CHUNK_RUNS, default /tmp/amorgp-chunk);
# 2. the noise fine-tuning:
#      amorgp train --phase 2 --from <phase 1>/last --set n_max=250 --max-steps 100
# 3. the export: OUTDIR/medium/ holds the phase-2 weights in bfloat16 shards of at most
#    15 MiB (checkpoint.json with SHA-256, 2 shards for medium) and campaign.jsonl, the
#    committed log plus this chunk's line (datasets, minutes, device, validation NLLs,
#    date, code revision); OUTDIR/chunk.log has the commands' output.  5 files in all.
#
# Back on the CPU:  rm -r models/medium && cp -r OUTDIR/medium models/medium, then the
# ship check (docs/guide/training.md, "GPU chunks").
#
# Time: everything ends within $AMORGP_CHUNK_SECONDS (default 540).  MINUTES (default:
# what is left after 100 s kept for start-up, phase 2 and the export: 7.33) is cut to fit
# (on an H200 those took 45-46 s in all, 2026-12-04).
# Environment: AMORGP_CHUNK_DEVICE (default cuda), AMORGP_CHUNK_FROM, AMORGP_CHUNK_RUNS,
# AMORGP_CHUNK_PRESET (default medium; the tests use tiny), AMORGP_REVISION (the code
# revision logged, where the copy on the GPU machine has no .git; default: git rev-parse),
# AMORGP_CHUNK_TOKENS=1 (phase 1 starts from FROM converted to read period and relevance
# tokens, `python -m amorgp.training.vocabulary`; a resumed run is not converted again;
# kinds FROM reads already are kept), AMORGP_CHUNK_GATE=1 (the same conversion with the
# learnt gate of the period anchors as well, `--learned-gate`),
# AMORGP_CHUNK_REAL_TABLES=POOL (a fresh phase 1 mixes real tables into its batches,
# `--set real_tables=POOL --set real_share=AMORGP_CHUNK_REAL_SHARE`, default share 0.5;
# POOL from `python -m amorgp_experiments.realpool`, about 30 MB, small enough to travel
# to the GPU machine beside the tree; docs/training/real-tables.md),
# AMORGP_CHUNK_SMOKE=1 (a test on any machine: CPU, 2 steps per phase, 8 datasets per
# batch, n <= 20, 8 validation datasets; its runs go to OUTDIR/.runs unless
# AMORGP_CHUNK_RUNS says otherwise).  Exits 0 when the weights were exported, 1 on a usage
# error, 2 when a step failed (OUTDIR/chunk.log says which).
set -u

if [ $# -lt 1 ]; then
    echo "usage: tools/gpu_chunk.sh OUTDIR [MINUTES]" >&2
    exit 1
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
PY=${PYTHON:-python}
START=$(date +%s)
TOTAL=${AMORGP_CHUNK_SECONDS:-540}
DEADLINE=$((START + TOTAL))
RESERVE=${AMORGP_CHUNK_RESERVE:-100}
FROM=${AMORGP_CHUNK_FROM:-models/medium}
RUNS=${AMORGP_CHUNK_RUNS:-/tmp/amorgp-chunk}
DEVICE=${AMORGP_CHUNK_DEVICE:-cuda}
PRESET=${AMORGP_CHUNK_PRESET:-medium}
REV=${AMORGP_REVISION:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
LOG="$OUT/chunk.log"

MAXMIN=$("$PY" -c "print(round(max(0.5, ($TOTAL - $RESERVE) / 60), 2))")
MINUTES=${2:-$MAXMIN}
MINUTES=$("$PY" -c "print(min(float('$MINUTES'), $MAXMIN))") || {
    echo "MINUTES must be a number, got '${2:-}'" >&2
    exit 1
}

SRC=$(ls -d "$ROOT"/packages/*/src | tr '\n' ':')
export PYTHONPATH="$SRC${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

PRIOR=(--set prior="${AMORGP_CHUNK_PRIOR:-realdata}" --set inputs="${AMORGP_CHUNK_INPUTS:-realistic}")
P1=(--set n_max=100 --set num_workers=12 --set warmup_steps=100 "${PRIOR[@]}")
P2=(--set n_max=250 --max-steps 100 "${PRIOR[@]}")
if [ "${AMORGP_CHUNK_SMOKE:-0}" = "1" ]; then
    DEVICE=cpu
    RUNS=${AMORGP_CHUNK_RUNS:-$OUT/.runs}  # never resumes a real chunk's run
    SMALL=(--set batch_size=8 --set val_size=8 --set num_workers=0 --set n_max=20)
    P1=("${SMALL[@]}" --set warmup_steps=1 --max-steps 2 "${PRIOR[@]}")
    P2=("${SMALL[@]}" --max-steps 2 "${PRIOR[@]}")
fi
REAL=()
if [ -n "${AMORGP_CHUNK_REAL_TABLES:-}" ]; then  # phase 1 only: phase 2 reads the true noise
    REAL=(--set real_tables="$AMORGP_CHUNK_REAL_TABLES" --set real_share="${AMORGP_CHUNK_REAL_SHARE:-0.5}")
    P1+=("${REAL[@]}")
    P2+=(--set real_share=0)  # the phase-1 recipe's share would be refused in phase 2
fi

left() { echo $((DEADLINE - $(date +%s))); }

{
    echo "GPU chunk: started $(date -u +%Y-%m-%dT%H:%M:%SZ), revision $REV, device $DEVICE,"
    echo "from $FROM, phase 1 for $MINUTES minutes, deadline in $TOTAL s."
} >"$LOG"

# 1. phase 1: continue the run of an earlier call on this machine, else start from FROM
mkdir -p "$RUNS"
if [ -e "$RUNS/p1/last" ]; then
    FIRST=(--resume)
    STARTED="$RUNS/p1 (resumed)"
else
    rm -rf "$RUNS/p1"
    START_FROM=$FROM
    STARTED="$FROM"
    GATE=()
    [ "${AMORGP_CHUNK_GATE:-0}" = "1" ] && GATE=(--learned-gate)
    if [ "${AMORGP_CHUNK_TOKENS:-0}" = "1" ] || [ ${#GATE[@]} -gt 0 ]; then
        rm -rf "$RUNS/from-tokens"
        echo "+ python -m amorgp.training.vocabulary $FROM $RUNS/from-tokens ${GATE[*]}" >>"$LOG"
        if ! "$PY" -m amorgp.training.vocabulary "$FROM" "$RUNS/from-tokens" "${GATE[@]}" \
            >>"$LOG" 2>&1; then
            echo "the conversion to tokens failed; nothing trained" >>"$LOG"
            cat "$LOG"
            exit 2
        fi
        START_FROM="$RUNS/from-tokens"
        STARTED="$FROM (with period and relevance tokens${GATE:+ and a learnt gate})"
    fi
    [ ${#REAL[@]} -gt 0 ] && STARTED="$STARTED, real tables ${AMORGP_CHUNK_REAL_TABLES} (share ${AMORGP_CHUNK_REAL_SHARE:-0.5})"
    FIRST=(--preset "$PRESET" --from "$START_FROM" "${P1[@]}")
fi
echo "+ amorgp train --out $RUNS/p1 --device $DEVICE ${FIRST[*]} --max-minutes $MINUTES" >>"$LOG"
timeout -k 10 $(($(left) - 45)) "$PY" -m amorgp.cli train --out "$RUNS/p1" \
    --device "$DEVICE" --no-progress "${FIRST[@]}" --max-minutes "$MINUTES" >>"$LOG" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -e "$RUNS/p1/last" ]; then
    echo "phase 1 failed (exit status $rc); nothing exported" >>"$LOG"
    cat "$LOG"
    exit 2
fi

# 2. the noise fine-tuning (a fresh run each call)
rm -rf "$RUNS/p2"
echo "+ amorgp train --phase 2 --from $RUNS/p1/last --out $RUNS/p2 ${P2[*]}" >>"$LOG"
timeout -k 10 $(($(left) - 10)) "$PY" -m amorgp.cli train --phase 2 \
    --from "$RUNS/p1/last" --out "$RUNS/p2" --device "$DEVICE" --no-progress "${P2[@]}" \
    >>"$LOG" 2>&1
rc=$?
PHASE2=(--phase2 "$RUNS/p2")
if [ $rc -ne 0 ] || [ ! -e "$RUNS/p2/last" ]; then
    echo "phase 2 failed (exit status $rc): exporting the phase-1 weights" >>"$LOG"
    PHASE2=()
fi

# 3. the export and the log line
COMMITTED_LOG=()
[ -f "$FROM/campaign.jsonl" ] && COMMITTED_LOG=(--log "$FROM/campaign.jsonl")
rm -rf "$OUT/medium"
echo "+ export to $OUT/medium" >>"$LOG"
timeout -k 2 $(($(left) - 2)) "$PY" -m amorgp.training.gpu_chunk \
    --phase1 "$RUNS/p1" "${PHASE2[@]}" --out "$OUT/medium" --start "$STARTED" \
    --device "$DEVICE" --revision "$REV" "${COMMITTED_LOG[@]}" >>"$LOG" 2>&1
rc=$?
echo "finished after $(($(date +%s) - START)) s (export exit status $rc)" >>"$LOG"
cat "$LOG"
[ $rc -eq 0 ] || exit 2
ls -l "$OUT/medium"
exit 0
