#!/usr/bin/env bash
# Install MaxText 0.2.5 (Google's JAX trainer, which ships AI2's OLMo 3) for bench/chip/maxtext_peer.py, the
# peer side of the TPU train-step benchmark.
#
# MaxText's wheel declares Python >= 3.12 and asks for JAX >= 0.11; the TPU machine has Python 3.11 and
# JAX 0.10.2, no network, and its own package index (file:///opt/pypi/simple). So nothing here resolves
# dependencies: every package is named with the exact version that index holds and installed with
# --no-deps into a folder of its own (--target), which the caller puts at the END of PYTHONPATH so that
# the JAX already there stays in charge (jax, jaxlib and libtpu are never installed into it). What that
# index lacks (or holds in a version that breaks MaxText) travels as wheels in .whl-tpu/maxtext/.
# The index list is the set of distributions MaxText's train step actually imports (read off
# sys.modules after a run), minus JAX and its own dependencies, plus safetensors and hf-xet, whose
# versions transformers and huggingface_hub check at import without importing them.
#
#   bench/setup/maxtext_setup.sh fetch [--libtpu]   (online, here) download the carried wheels into
#       .whl-tpu/maxtext/ (~20 MB) and build .venv-maxtext: Python 3.11 with the device's JAX 0.10.2 (CPU),
#       and MaxText installed by `install` into .venv-maxtext/site, exactly as on the device. --libtpu adds
#       libtpu 0.0.42.1 (the chip's, ~213 MB) to that venv so the TPU step can be compiled ahead of time
#       here (bench/chip/maxtext_peer.py --aot).
#   bench/setup/maxtext_setup.sh install            (offline, on the TPU machine) install into /tmp/site.
#
# Environment: MAXTEXT_SITE (install target; /tmp/site), MAXTEXT_INDEX (package index; the local
# file:///opt/pypi/simple where it exists, else PyPI), MAXTEXT_WHEELS (.whl-tpu/maxtext), PYTHON (the
# interpreter that installs and later runs MaxText; python3), MAXTEXT_VENV (.venv-maxtext).
# Idempotent: `fetch` exits early when the wheels are there and the venv imports MaxText's train step.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
wheels="${MAXTEXT_WHEELS:-$repo/.whl-tpu/maxtext}"
venv="${MAXTEXT_VENV:-$repo/.venv-maxtext}"
if [[ -n "${MAXTEXT_INDEX:-}" ]]; then
  index="$MAXTEXT_INDEX"
elif [[ -d /opt/pypi/simple/jax ]]; then
  index=file:///opt/pypi/simple
else
  index=https://pypi.org/simple
fi

# Carried as wheels: absent from the device's index, or there in a version that breaks MaxText there:
# tokamax 0.0.12 (MaxText asks >= 0.0.14, which needs JAX 0.11 and Python 3.12), typeguard 2.13.3
# (tokamax's pin; the index's 4.x rejects jaxtyping's shape strings), omegaconf 2.4.0 (the index's
# 2.3.1 needs antlr4, which it lacks).
CARRIED_PY311=(grain==0.2.18 array-record==0.8.6 tokamax==0.0.12 qwix==0.1.8 aqtp==0.9.0 drjax==0.2.1
  einshape==1.0 pathwaysutils==0.1.13 portpicker==1.6.0 typeguard==2.13.3 omegaconf==2.4.0)
CARRIED_PY312=(maxtext==0.2.5) # pure Python, declared >= 3.12; two PEP 695 lines are fixed below
# From the device's index, pinned to the versions it holds (so here and there install the same files).
INDEX_PKGS=(absl-py==2.5.0 annotated-doc==0.0.5 annotated-types==0.8.0 anyio==4.15.1 certifi==2026.7.22
  click==8.5.0 cloudpickle==3.1.2 etils==1.14.0 fastapi==0.142.2 filelock==4.0.8 flax==0.12.8
  h11==0.16.0 httpcore==1.0.9 httpx==0.28.1 huggingface-hub==1.33.0 humanize==4.16.0 idna==3.20
  immutabledict==4.3.1 hf-xet==1.6.0 jaxtyping==0.3.11 jinja2==3.1.6 markupsafe==3.0.3
  ml-collections==1.1.0 mpmath==1.4.1 msgpack==1.2.3 opentelemetry-api==1.45.0 optax==0.2.8
  orbax-checkpoint==0.12.4 packaging==26.3 pillow==12.3.0 protobuf==7.36.2 psutil==7.2.2
  pydantic==2.13.5 pydantic-core==2.46.5 pyyaml==6.0.3 regex==2026.9.29 requests==2.34.2 rich==15.0.0
  safetensors==0.8.0 sentencepiece==0.2.2 simplejson==4.1.2 starlette==1.7.0 sympy==1.14.0
  tensorstore==0.1.85 tiktoken==0.14.0 tokenizers==0.23.2 tqdm==4.70.1 transformers==5.17.0
  treescope==0.1.10 typing-extensions==4.16.0 typing-inspection==0.4.4 urllib3==2.8.0 uvicorn==0.54.0
  wadler-lindig==0.1.7)
# The device's preinstalled JAX stack, for the CPU venv that stands in for it here.
JAX_BASE=(jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 scipy==1.17.1 ml-dtypes==0.6.0 opt-einsum==3.4.0)
LIBTPU=libtpu==0.0.42.1

# The import the benchmark needs, with the must_fuse_call stand-in bench/chip/maxtext_peer.py also applies
# (MaxText imports it from JAX >= 0.11; only its non-TPU flash kernel calls it).
IMPORT_CHECK='
import jax.experimental.xla_metadata as m
m.must_fuse_call = getattr(m, "must_fuse_call", lambda f, *a, **k: f)
import maxtext.trainers.pre_train.train  # noqa
'

install() {
  local python="${PYTHON:-python3}" site="${MAXTEXT_SITE:-/tmp/site}"
  local have=("$wheels"/*.whl)
  if (( ${#have[@]} != ${#CARRIED_PY311[@]} + ${#CARRIED_PY312[@]} )) || [[ ! -e "${have[0]}" ]]; then
    echo "maxtext_setup: expected $(( ${#CARRIED_PY311[@]} + ${#CARRIED_PY312[@]} )) wheels in $wheels," \
      "found ${#have[@]} (run 'bench/setup/maxtext_setup.sh fetch' where there is a network)" >&2
    exit 1
  fi
  local start=$SECONDS
  # pip with no user or machine configuration (PIP_CONFIG_FILE=/dev/null, --isolated) sees only the
  # index and the wheels named here. One pip call: the index for most, the carried wheels through
  # --find-links, every version exact, no dependency resolution (--ignore-requires-python is for
  # maxtext's ">= 3.12" alone: with exact pins it leaves pip no other choice to make).
  PIP_CONFIG_FILE=/dev/null "$python" -m pip install --isolated --disable-pip-version-check -q \
    --no-deps --ignore-requires-python --only-binary=:all: --no-compile --upgrade \
    --index-url "$index" --find-links "$wheels" --target "$site" \
    "${INDEX_PKGS[@]}" "${CARRIED_PY311[@]}" "${CARRIED_PY312[@]}" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) # the carried names, absent there
  # Python 3.11 cannot parse PEP 695 `type X = ...` statements; MaxText has two on its import path
  # (type aliases OLMo 3 never uses). Plain assignments mean the same to everything that reads them.
  local f
  for f in "$site"/maxtext/kernels/mhc/api.py "$site"/maxtext/kernels/mhc/common.py; do
    sed -i -E 's/^type ([A-Za-z_][A-Za-z0-9_]*) = /\1 = /' "$f"
  done
  "$python" -m py_compile "$site"/maxtext/kernels/mhc/api.py "$site"/maxtext/kernels/mhc/common.py
  # A package the interpreter already has earlier on PYTHONPATH wins over the copy installed here; say
  # which, with both versions, since a much older one there is the likeliest failure on the device.
  PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site" "$python" - "$site" <<'PY'
import importlib.metadata as md, pathlib, sys
site = pathlib.Path(sys.argv[1]).resolve()
shadowed = []
for info in sorted(site.glob("*.dist-info")):
    dist = md.PathDistribution(info)
    found = md.distribution(dist.metadata["Name"])
    if pathlib.Path(str(found.locate_file(""))).resolve() != site:
        shadowed.append(f"{dist.metadata['Name']} {found.version} (installed here: {dist.version})")
print("maxtext_setup: already on PYTHONPATH ahead of the install:", ", ".join(shadowed) or "none")
PY
  echo "maxtext_setup: installed $(( ${#INDEX_PKGS[@]} + ${#have[@]} )) packages into $site" \
    "in $(( SECONDS - start )) s; put it at the END of PYTHONPATH"
}

fetch() {
  local with_libtpu=0
  case "${1:-}" in
    "") ;;
    --libtpu) with_libtpu=1 ;;
    *)
      echo "maxtext_setup: fetch takes only --libtpu, not '$1'" >&2
      exit 2
      ;;
  esac
  local site="$venv/site"
  if [[ -x "$venv/bin/python" ]] && ls "$wheels"/maxtext-0.2.5-*.whl >/dev/null 2>&1 &&
    JAX_PLATFORMS=cpu PYTHONPATH="$site" "$venv/bin/python" -c "$IMPORT_CHECK" >/dev/null 2>&1 &&
    { ((with_libtpu == 0)) || "$venv/bin/python" -c 'import libtpu' 2>/dev/null; }; then
    echo "maxtext_setup: $venv already imports MaxText's train step"
    return 0
  fi
  mkdir -p "$wheels"
  local dl=(-m pip download -q --no-deps --only-binary=:all: --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
    --index-url https://pypi.org/simple -d "$wheels")
  PIP_CONFIG_FILE=/dev/null python3 "${dl[@]}" --python-version 3.11 "${CARRIED_PY311[@]}"
  PIP_CONFIG_FILE=/dev/null python3 "${dl[@]}" --python-version 3.12 "${CARRIED_PY312[@]}"
  echo "maxtext_setup: $(du -sh "$wheels" | cut -f1) of wheels in $wheels"

  if [[ ! -x "$venv/bin/python" ]]; then
    # the device's Python is 3.11: so is the venv that stands in for it
    local py311
    py311="$(command -v python3.11 || command -v python3)"
    if [[ "$("$py311" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" != True ]]; then
      echo "maxtext_setup: the venv needs Python 3.11 (the TPU machine's); found $py311" >&2
      exit 1
    fi
    "$py311" -m venv "$venv"
  fi
  local base=("${JAX_BASE[@]}")
  ((with_libtpu == 0)) || base+=("$LIBTPU")
  PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install --isolated --disable-pip-version-check -q \
    --only-binary=:all: --index-url "$index" "${base[@]}"
  rm -rf "$site"
  PYTHON="$venv/bin/python" MAXTEXT_SITE="$site" install
  if ! JAX_PLATFORMS=cpu PYTHONPATH="$site" "$venv/bin/python" -c "$IMPORT_CHECK"; then
    echo "maxtext_setup: $venv was built but does not import MaxText's train step" >&2
    exit 1
  fi
  echo "maxtext_setup: $venv ready (run MaxText with PYTHONPATH=$site)"
}

case "${1:-}" in
  fetch) fetch "${2:-}" ;;
  install) install ;;
  *)
    echo "usage: bench/setup/maxtext_setup.sh fetch [--libtpu] | install" >&2
    exit 2
    ;;
esac
