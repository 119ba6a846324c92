#!/usr/bin/env bash
# Build the isolated venv that bench/peers/prepare.py uses to run AI2's `dolma tokens` (PyPI dolma==1.2.1).
#
# dolma's pins (s3fs==2023.6.0, numpy<2, tokenizers<=0.19.1, ...) make pip's resolver spin when they
# meet olmax's own dependencies, so dolma gets a venv of its own, filled in steps: dolma itself with
# --no-deps, then its hard pins, then s3fs with --no-deps (its aiobotocore pins are what spin; the
# tokenizer path never touches S3), then the rest of its Requires-Dist with ordinary resolution.
#
# Idempotent: exits at once when the venv already imports what `dolma tokens` needs.
# Usage: bench/setup/setup_dolma.sh [VENV_DIR]   (default: <repo>/.venv-dolma, git-ignored)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-${DOLMA_VENV:-$repo/.venv-dolma}}"
python="${PYTHON:-python3}"

# The check that decides "already set up": the versions dolma needs, and the tokens CLI importable.
check() {
  "$venv/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as md
assert md.version("dolma") == "1.2.1"
assert md.version("tokenizers") == "0.19.1"
assert int(md.version("numpy").split(".")[0]) < 2
import dolma.cli.tokenizer  # noqa: F401  (imports everything `dolma tokens` runs)
EOF
}

if [[ -x "$venv/bin/dolma" ]] && check; then
  echo "setup_dolma: $venv already works"
  exit 0
fi

echo "setup_dolma: building $venv"
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

# 1. dolma alone: its declared requirements are installed below, step by step.
"${pip[@]}" --no-deps 'dolma==1.2.1'
# 2. its hard pins, which must win over anything the later steps would pick.
"${pip[@]}" 'numpy<2' 'tokenizers==0.19.1' 'fasttext-wheel==0.9.2'
# 3. s3fs exactly as pinned, without its aiobotocore/fsspec pins (the source of the resolver spin).
"${pip[@]}" --no-deps 's3fs==2023.6.0'
# 4. the rest of dolma 1.2.1's Requires-Dist (from its METADATA), ordinary resolution.
"${pip[@]}" 'anyascii>=0.3.2' 'blingfire==0.1.8' boto3 'fsspec>=2023.6.0' jsonpath-ng jq \
  'msgspec>=0.14.2' 'nltk>=3.9.1' 'omegaconf>=2.3.0' 'platformdirs>=4.2.0' pyyaml \
  'python-dotenv>=0.19.0' requests rich 'smart-open>=7.0.4' tqdm uniseg 'necessary>=0.4.3' \
  'charset-normalizer>=3.2.0' 'zstandard>=0.23.0' 'numpy<2' 'tokenizers==0.19.1'

if ! check; then
  echo "setup_dolma: $venv was built but does not import dolma's tokenizer CLI; see the pip output above" >&2
  exit 1
fi
echo "setup_dolma: $venv ready"
