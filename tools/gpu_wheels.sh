#!/usr/bin/env bash
# Collect the wheels that tools/gpu_check.sh installs on a machine without a package
# registry: pykeops and keopscore (pure Python; KeOps compiles its formulas at run time).
#
# Usage:  tools/gpu_wheels.sh [DIR]     (default DIR: .whl at the repository root)
#
# Takes each wheel from pip's cache when it is there (`pip cache list`), else downloads
# it (`pip download --no-deps`, needs a registry).  Then, for the GPU machine:
#   AMORGP_WHEELS=DIR tools/gpu_check.sh OUTDIR
# (.whl at the repository root is the default, and travels with an untracked work tree).
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-$ROOT/.whl}
PY=${PYTHON:-python}
VERSION=${PYKEOPS_VERSION:-$("$PY" -c 'import importlib.metadata as m; print(m.version("pykeops"))' 2>/dev/null || echo 2.3)}
mkdir -p "$DIR"
for pkg in pykeops keopscore; do
    cached=$("$PY" -m pip cache list --format=abspath "$pkg-$VERSION-*" 2>/dev/null | head -n 1 || true)
    if [ -n "$cached" ] && [ -f "$cached" ]; then
        cp "$cached" "$DIR/"
    else
        "$PY" -m pip download --no-deps --disable-pip-version-check -d "$DIR" "$pkg==$VERSION"
    fi
done
ls -l "$DIR"
