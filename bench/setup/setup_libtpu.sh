#!/usr/bin/env bash
# Put libtpu (the TPU's compiler and runtime, the version the v5e chip runs) in a folder of its own, so that
# this CPU machine can compile olmax's train step for a TPU ahead of time: `bench/chip/tpu_mfu.py --plan` and
# tests/bench/test_tpu_plan.py run the project's Python with this folder on PYTHONPATH. The project's own
# venv stays CPU-only: nothing in it imports libtpu unless PYTHONPATH names this folder.
#
# Idempotent: exits at once when the folder already holds the pinned version.
# Usage: bench/setup/setup_libtpu.sh [DIR]   (default: <repo>/.venv-libtpu, git-ignored)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-${OLMAX_LIBTPU_DIR:-$repo/.venv-libtpu}}"
python="${PYTHON:-python3}"
LIBTPU=0.0.42.1  # what the v5e machine's JAX 0.10.2 runs with (its `pip show libtpu`)

if PYTHONPATH="$dir" "$python" -c "import importlib.metadata as m, sys; sys.exit(m.version('libtpu') != '$LIBTPU')" 2>/dev/null; then
  echo "setup_libtpu: $dir holds libtpu $LIBTPU"
  exit 0
fi
rm -rf "$dir"
"$python" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: --target "$dir" "libtpu==$LIBTPU"
echo "setup_libtpu: libtpu $LIBTPU in $dir ($(du -sh "$dir" | cut -f1))"
