#!/usr/bin/env bash
# Build the isolated venv that bench/peers/dedup.py runs its MinHash peers in: datatrove (HuggingFace), rensa
# (Rust MinHash with Python bindings) and datasketch (MinHashLSH).
#
# The peers get a venv of their own so that their pins never move the project's venv; bench/peers/dedup.py
# calls them through bench/peers/dedup_peer.py run by this venv's Python, on the same files olmax reads.
#
# Idempotent: exits at once when the venv already imports the pinned versions.
# Usage: bench/setup/setup_dedup_peers.sh [VENV_DIR]   (default: <repo>/.venv-dedup-peers, git-ignored)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-${DEDUP_PEERS_VENV:-$repo/.venv-dedup-peers}}"
python="${PYTHON:-python3}"

# The versions the figures in docs/dedup-benchmarks.md were measured with.
DATATROVE=0.10.1
RENSA=0.5.0
DATASKETCH=2.0.0
SPACY=3.8.18  # datatrove splits English into words with a blank spaCy pipeline

check() {
  "$venv/bin/python" - "$DATATROVE" "$RENSA" "$DATASKETCH" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
want = dict(zip(("datatrove", "rensa", "datasketch"), sys.argv[1:]))
for name, version in want.items():
    assert md.version(name) == version, (name, md.version(name))
import datasketch, rensa  # noqa: F401,E401
from datatrove.pipeline.dedup.minhash import MinhashDedupSignature  # noqa: F401
from datatrove.utils.word_tokenizers import load_word_tokenizer
assert load_word_tokenizer("en").word_tokenize("two words") == ["two", "words"]
PY
}

if [[ -x "$venv/bin/python" ]] && check; then
  echo "setup_dedup_peers: $venv already works"
  exit 0
fi

echo "setup_dedup_peers: building $venv"
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "datatrove[processing]==$DATATROVE" "rensa==$RENSA" "datasketch==$DATASKETCH" \
  "spacy==$SPACY" orjson zstandard

if ! check; then
  echo "setup_dedup_peers: $venv was built but does not import the peers; see the pip output above" >&2
  exit 1
fi
echo "setup_dedup_peers: $venv ready"
