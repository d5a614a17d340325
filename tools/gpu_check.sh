#!/usr/bin/env bash
# The GPU check: every package's CUDA tests and the GPU benchmark, in one call, within
# 9 minutes, on a machine as it comes (no package registry, amorgp not installed).
#
# Usage:  tools/gpu_check.sh OUTDIR [--quick]
#
# Needs python with torch (CUDA build), pytest, hypothesis, scipy, scikit-learn, gpytorch,
# botorch, numpy, safetensors and tqdm.  The amorgp packages run from this checkout
# (PYTHONPATH=packages/*/src).  Wheels of anything else, pykeops and keopscore first
# (and pybind11 for KeOps on the CPU), travel as files: every *.whl in $AMORGP_WHEELS
# (default: .whl/ at the repository root) is installed with
# `pip install --no-index --no-deps --target` into a temporary folder put on PYTHONPATH.
# Without pykeops the KeOps tests skip and the large-n benchmark uses the torch block
# operator; a pykeops that crashes is caught by the KeOps probe and reported.
#
# --quick: the benchmark's CPU smoke run (small n); the CUDA tests still run (they skip
# without a CUDA device).  Environment: AMORGP_GPU_CHECK_SECONDS (total time, default
# 530), AMORGP_KEOPS_PROBE_TIMEOUT (default 120), AMORGP_GPU_BENCH_ARGS (more arguments
# of benchmarks/bench_gpu.py, e.g. "--sizes 100000 --test-points 200" where the time is
# short: the first H200 run spent 84 s on the mean alone at n = 100,000).
#
# Writes into OUTDIR: summary.md (each step: exit status, seconds; test counts),
# env.txt, probe.txt, keops-probe.json, tests/<package>.{log,xml}, gpu.md (the benchmark
# tables, docs/benchmarks/gpu.md format) and bench.log.  Exits 0 when every step
# finished (test failures are results, reported in summary.md), 1 on a usage error.
set -u

if [ $# -lt 1 ]; then
    echo "usage: tools/gpu_check.sh OUTDIR [--quick]" >&2
    exit 1
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
QUICK=0
[ "${2:-}" = "--quick" ] && QUICK=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
PY=${PYTHON:-python}
START=$(date +%s)
DEADLINE=$((START + ${AMORGP_GPU_CHECK_SECONDS:-530}))
SITE=$(mktemp -d "${TMPDIR:-/tmp}/amorgp-gpu-check.XXXXXX")
trap 'rm -rf "$SITE"' EXIT
mkdir -p "$OUT/tests"

SRC=$(ls -d "$ROOT"/packages/*/src | tr '\n' ':')
export PYTHONPATH="$SITE:$SRC${PYTHONPATH:+:$PYTHONPATH}"
export AMORGP_KEOPS_PROBE_CACHE="$OUT/keops-probe.json"
export AMORGP_KEOPS_PROBE_TIMEOUT=${AMORGP_KEOPS_PROBE_TIMEOUT:-120}
export PYTHONFAULTHANDLER=1

SUMMARY="$OUT/summary.md"
{
    echo "# GPU check"
    echo
    echo "Started $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), quick=$QUICK."
    echo
    echo "| step | exit status | seconds | note |"
    echo "|---|---|---|---|"
} >"$SUMMARY"

# step NAME MAX_SECONDS LOG COMMAND...: run COMMAND with a timeout of MAX_SECONDS or
# what is left before the deadline (less 15 s for the summary), whichever is smaller.
step() {
    local name=$1 max=$2 log=$3
    shift 3
    local left=$((DEADLINE - $(date +%s) - 15))
    local limit=$((max < left ? max : left))
    if [ "$limit" -lt 5 ]; then
        echo "| $name | skipped | 0 | no time left |" >>"$SUMMARY"
        return
    fi
    local t0 rc note=""
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then note="cut at ${limit} s"; fi
    if [ $rc -gt 128 ] && [ $rc -ne 137 ]; then note="killed by signal $((rc - 128))"; fi
    echo "| $name | $rc | $(($(date +%s) - t0)) | $note |" >>"$SUMMARY"
}

# 1. the machine and the imports
step environment 60 "$OUT/env.txt" bash -c '
    date -u; uname -a; nvidia-smi || true
    '"$PY"' - <<EOF
import importlib, sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
missing = []
for m in ["numpy", "scipy", "sklearn", "pytest", "hypothesis", "gpytorch", "botorch",
          "safetensors", "tqdm", "click", "matplotlib", "pykeops", "keopscore", "pybind11"]:
    try:
        importlib.import_module(m)
    except Exception as exc:
        missing.append(f"{m} ({type(exc).__name__})")
print("missing:", ", ".join(missing) or "none")
EOF'

# 2. wheels that travel as files (pykeops, keopscore, ...)
WHEELS=${AMORGP_WHEELS:-$ROOT/.whl}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    step wheels 120 "$OUT/wheels.log" "$PY" -m pip install --no-index --no-deps \
        --disable-pip-version-check --target "$SITE" "$WHEELS"/*.whl
else
    echo "| wheels | skipped | 0 | no *.whl in $WHEELS |" >>"$SUMMARY"
fi

# 3. the KeOps probe on the device (a subprocess: a crash is a result, not the end)
step keops-probe 150 "$OUT/probe.txt" "$PY" -c '
import torch
from amorgp.lazy_kernels import probe_keops
device = "cuda" if torch.cuda.is_available() else "cpu"
print(device, probe_keops(device, refresh=True))
'

# 4. every package's CUDA tests
for pkg in core diff-linalg lazy-kernels simulator baselines ensembles amortizer training cli gpytorch kernel-grammar; do
    dir="$ROOT/packages/$pkg"
    if ! grep -rqs "mark.cuda" "$dir/tests"; then
        echo "| tests $pkg | skipped | 0 | no cuda test |" >>"$SUMMARY"
        continue
    fi
    step "tests $pkg" 120 "$OUT/tests/$pkg.log" bash -c \
        "cd '$dir' && '$PY' -m pytest tests -m cuda -q -rs -p no:cacheprovider \
         --junitxml='$OUT/tests/$pkg.xml'"
done

# 5. the GPU benchmark (tables rewritten after each measurement: a cut run keeps them)
read -r -a BENCH_ARGS <<<"${AMORGP_GPU_BENCH_ARGS:-}"
if [ $QUICK -eq 1 ]; then
    step benchmark 300 "$OUT/bench.log" "$PY" benchmarks/bench_gpu.py --quick --out "$OUT/gpu.md" \
        "${BENCH_ARGS[@]}"
else
    step benchmark 600 "$OUT/bench.log" "$PY" benchmarks/bench_gpu.py --out "$OUT/gpu.md" \
        "${BENCH_ARGS[@]}"
fi

# test counts from the JUnit files
"$PY" - "$OUT" >>"$SUMMARY" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

rows = []
for xml in sorted(Path(sys.argv[1], "tests").glob("*.xml")):
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        rows.append(f"| {xml.stem} | unreadable | | | |")
        continue
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    rows.append(
        f"| {xml.stem} | {passed} | {total['failures']} | {total['errors']} | {total['skipped']} |"
    )
print("\n## CUDA tests\n\n| package | passed | failed | errors | skipped |\n|---|---|---|---|---|")
print("\n".join(rows) if rows else "| (none ran) | | | | |")
EOF
echo >>"$SUMMARY"
echo "Finished after $(($(date +%s) - START)) s." >>"$SUMMARY"
cat "$SUMMARY"
[ -f "$OUT/gpu.md" ] && cat "$OUT/gpu.md"
exit 0
