#!/usr/bin/env bash
# The GPU check and a chunk of the `medium` network in one call of a lent GPU machine
# (a call runs at most 10 minutes and brings back at most 8 files of 16 MiB).
#
# Usage:  tools/gpu_session.sh OUTDIR [CHECK_SECONDS [CHUNK_SECONDS]]
#
# 1. tools/gpu_check.sh for CHECK_SECONDS (default 270; 0 skips it), its folder packed into
#    OUTDIR/check.tgz (summary.md, gpu.md, env.txt, the KeOps probe, every package's CUDA
#    test log and JUnit file, bench.log);
# 2. tools/gpu_chunk.sh for CHUNK_SECONDS (default 300): OUTDIR/medium/ (4 files) and
#    OUTDIR/chunk.log.  On a machine still held from an earlier call its phase 1 resumes the
#    earlier run (gpu_chunk.sh), so a second call while the machine is warm,
#    `tools/gpu_session.sh OUTDIR 0 CHUNK_SECONDS`, trains on without a fresh start.
#
# Six files come back in all.  Wheels (.whl, tools/gpu_wheels.sh) travel with `carry`.
# Where the copy has no .git, pass the revision to log as AMORGP_REVISION=<rev>.
# AMORGP_SESSION_SMOKE=1: the same on any machine (the check's --quick run, the chunk's
# AMORGP_CHUNK_SMOKE=1 run).  Exits 0 when the chunk exported its weights, 2 otherwise,
# 1 on a usage error.
set -u

if [ $# -lt 1 ]; then
    echo "usage: tools/gpu_session.sh OUTDIR [CHECK_SECONDS [CHUNK_SECONDS]]" >&2
    exit 1
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
CHECK=${2:-270}
CHUNK=${3:-300}
case "$CHECK$CHUNK" in
    *[!0-9]*)
        echo "CHECK_SECONDS and CHUNK_SECONDS must be whole seconds, got '$CHECK' '$CHUNK'" >&2
        exit 1
        ;;
esac
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONUNBUFFERED=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/amorgp-gpu-session.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
QUICK=()
if [ "${AMORGP_SESSION_SMOKE:-0}" = "1" ]; then
    QUICK=(--quick)
    export AMORGP_CHUNK_SMOKE=1
fi

if [ "$CHECK" -gt 0 ]; then
    AMORGP_GPU_CHECK_SECONDS=$CHECK bash "$ROOT/tools/gpu_check.sh" "$WORK/check" "${QUICK[@]}" \
        >"$WORK/check.out" 2>&1
    tar czf "$OUT/check.tgz" -C "$WORK" check check.out
    cat "$WORK/check/summary.md"
fi

AMORGP_CHUNK_SECONDS=$CHUNK bash "$ROOT/tools/gpu_chunk.sh" "$WORK/chunk" >"$WORK/chunk.out" 2>&1
rc=$?
[ -f "$WORK/chunk/chunk.log" ] && cp "$WORK/chunk/chunk.log" "$OUT/"
rm -rf "$OUT/medium"
[ -d "$WORK/chunk/medium" ] && cp -r "$WORK/chunk/medium" "$OUT/medium"
tail -n 6 "$WORK/chunk.out"
[ "$CHECK" -gt 0 ] && [ -f "$WORK/check/gpu.md" ] && sed -n '/^## Amortized/,/^## How/p' "$WORK/check/gpu.md"
[ $rc -eq 0 ] || exit 2
exit 0
