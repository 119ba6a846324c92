#!/usr/bin/env bash
# What `olmax train` and bench/chip/tpu_seed.py need on the TPU machine, which has no network: Python 3.11, JAX
# 0.10.2 + libtpu + numpy + scipy preinstalled (first on PYTHONPATH), its own package index
# (file:///opt/pypi/simple) and torch's CPU build in /opt/wheels.
#
# Nothing here resolves dependencies on the device. The lists below are the dependency closure of olmax's
# train path and of the parity check, resolved once by pip against that index (the same index lies on this
# machine's disk) with the preinstalled JAX stack held at its versions, and every package is installed with
# --no-deps at the exact version the index holds, into a folder of its own (--target) that the caller puts
# at the END of PYTHONPATH, so the machine's JAX stays in charge. What the index lacks (or holds only in a
# version that does not import there) travels as wheels in .whl-tpu/olmax/ (~8 MB). olmax itself is not
# installed: it runs from the checkout (PYTHONPATH), with the `olmax` command written as pip writes a
# console script, and without its optional compiled reader (olmax/data/jsonl_scan.c, a git-ignored build).
#
#   bench/setup/tpu_wheels.sh fetch      (here, online) download the carried wheels into .whl-tpu/olmax/ and build
#       .venv-tpu-seed: a Python 3.11 venv holding only the device's JAX stack (CPU), with `install` and
#       `install-parity` run into .venv-tpu-seed/site and .venv-tpu-seed/site-parity exactly as on the
#       device; then prints the device command. tests/bench/test_tpu_seed.py runs the smoke in it.
#   bench/setup/tpu_wheels.sh install [SITE]          (device) the train closure + carried wheels into SITE
#       (/tmp/site) and SITE/bin/olmax
#   bench/setup/tpu_wheels.sh install-parity [SITE]   (device) transformers, torch (from /opt/wheels) and their
#       closure into SITE (/tmp/site-parity); bench/chip/tpu_seed.py starts it in the background
#   bench/setup/tpu_wheels.sh command                 print the device command and its `carry` list
#
# Environment: TPU_SEED_INDEX (the package index; file:///opt/pypi/simple where it exists, else PyPI),
# TPU_SEED_WHEELS (.whl-tpu/olmax), TPU_SEED_VENV (.venv-tpu-seed), PYTHON (the interpreter that installs
# and later runs olmax; python3).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
wheels="${TPU_SEED_WHEELS:-$repo/.whl-tpu/olmax}"
venv="${TPU_SEED_VENV:-$repo/.venv-tpu-seed}"
if [[ -n "${TPU_SEED_INDEX:-}" ]]; then
  index="$TPU_SEED_INDEX"
elif [[ -d /opt/pypi/simple/flax ]]; then
  index=file:///opt/pypi/simple
else
  index=https://pypi.org/simple
fi
torch_links=/opt/wheels # torch's CPU build on the device (and here); else PyTorch's own CPU index
[[ -d "$torch_links" ]] || torch_links=https://download.pytorch.org/whl/cpu/torch/

# Carried: not in the device's index (grain, array-record, portpicker, pysimdjson), or there only as 2.3.1
# (omegaconf), which needs antlr4, which the index lacks.
CARRIED=(grain==0.2.18 array-record==0.8.6 omegaconf==2.4.0 portpicker==1.6.0 pysimdjson==7.0.2)
# The train path's closure from the index (flax, optax, orbax, numba, the loader's, the monitor's and the
# logs' packages and what they declare), every version the one the index holds.
TRAIN_INDEX=(absl-py==2.5.0 aiofiles==25.1.0 cloudpickle==3.1.2 etils==1.14.0 flax==0.12.8
  fsspec==2026.9.0 humanize==4.16.0 llvmlite==0.50.0 markdown-it-py==4.2.0 mdurl==0.1.2 msgpack==1.2.3
  numba==0.68.0 optax==0.2.8 orbax-checkpoint==0.12.4 orjson==3.12.0 packaging==26.3
  prometheus-client==0.26.0 protobuf==7.36.2 psutil==7.2.2 pygments==2.21.0 pyyaml==6.0.3 rich==15.0.0
  simplejson==4.1.2 tensorboardx==2.6.5 tensorstore==0.1.85 tqdm==4.70.1 treescope==0.1.10
  typing-extensions==4.16.0 uvloop==0.23.0 xxhash==4.0.1 zipp==4.1.0 zstandard==0.25.0)
# The parity check's: transformers' Olmo3ForCausalLM on torch's CPU build (torch from the wheel folder), and
# tiktoken, the tokenizer engine `olmax model convert` writes the export's tokenizer files with here (the
# faster gigatoken is not in the index).
PARITY_INDEX=(annotated-doc==0.0.5 anyio==4.15.1 certifi==2026.7.22 charset-normalizer==3.5.2
  click==8.5.0 filelock==4.0.8 h11==0.16.0 hf-xet==1.6.0 httpcore==1.0.9 httpx==0.28.1
  huggingface-hub==1.33.0 idna==3.20 jinja2==3.1.6 markupsafe==3.0.3 mpmath==1.3.0 networkx==3.6.1
  regex==2026.9.29 requests==2.34.2 safetensors==0.8.0 setuptools==84.0.0 shellingham==1.5.4
  sympy==1.14.0 tiktoken==0.14.0 tokenizers==0.23.2 transformers==5.17.0 typer==0.27.2 urllib3==2.8.0)
TORCH=torch==2.13.0
# The device's preinstalled JAX stack, for the CPU venv that stands in for it here.
JAX_BASE=(jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 scipy==1.17.1 ml-dtypes==0.6.0 opt-einsum==3.4.0)

pip_install() { # pip with no user or machine configuration: only the index and links named here
  PIP_CONFIG_FILE=/dev/null "${PYTHON:-python3}" -m pip install --isolated --disable-pip-version-check -q \
    --no-deps --only-binary=:all: --no-compile --upgrade --index-url "$index" "$@"
}

shadowed() { # packages of SITE that an earlier PYTHONPATH entry (the machine's own) hides, with versions
  PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$1" "${PYTHON:-python3}" - "$1" <<'PY'
import importlib.metadata as md, pathlib, sys
site = pathlib.Path(sys.argv[1]).resolve()
out = []
for info in sorted(site.glob("*.dist-info")):
    dist = md.PathDistribution(info)
    found = md.distribution(dist.metadata["Name"])
    if pathlib.Path(str(found.locate_file(""))).resolve() != site:
        out.append(f"{dist.metadata['Name']} {found.version} (installed here: {dist.version})")
print(f"tpu_wheels: in {site}, hidden by an earlier PYTHONPATH entry:", ", ".join(out) or "none")
PY
}

install() {
  local site="${1:-/tmp/site}" start=$SECONDS
  local have=("$wheels"/*.whl)
  if [[ ! -e "${have[0]}" ]] || ((${#have[@]} != ${#CARRIED[@]})); then
    echo "tpu_wheels: expected ${#CARRIED[@]} wheels in $wheels, found ${#have[@]} (run 'bench/setup/tpu_wheels.sh" \
      "fetch' where there is a network, and carry .whl-tpu/olmax)" >&2
    exit 1
  fi
  pip_install --find-links "$wheels" --target "$site" "${TRAIN_INDEX[@]}" "${CARRIED[@]}"
  # the `olmax` command, as pip writes the console script of pyproject's [project.scripts] olmax = olmax.cli:main
  mkdir -p "$site/bin"
  printf '%s\n' "#!/usr/bin/env ${PYTHON:-python3}" 'import sys' 'from olmax.cli import main' \
    'sys.exit(main())' >"$site/bin/olmax"
  chmod +x "$site/bin/olmax"
  shadowed "$site"
  echo "tpu_wheels: $((${#TRAIN_INDEX[@]} + ${#CARRIED[@]})) packages in $site in $((SECONDS - start)) s;" \
    "use PYTHONPATH=\$PYTHONPATH:$site:$repo PATH=$site/bin:\$PATH"
}

install_parity() {
  local site="${1:-/tmp/site-parity}" start=$SECONDS
  pip_install --find-links "$torch_links" --target "$site" "${PARITY_INDEX[@]}" "$TORCH"
  echo "tpu_wheels: $((${#PARITY_INDEX[@]} + 1)) packages in $site in $((SECONDS - start)) s"
}

# The device command (at most 2,000 characters; run in the checkout's root with $OUT set). The wheels and
# the prepared data travel as the carried folders it names.
CARRY='[".whl-tpu/olmax", "bench/out/tpu_seed"]'
command_line() {
  cat <<'CMD'
set -o pipefail; export PYTHONUNBUFFERED=1; bash bench/setup/tpu_wheels.sh install /tmp/site 2>&1 | tee $OUT/install.log || exit 1; export PYTHONPATH=$PYTHONPATH:/tmp/site:$PWD PATH=/tmp/site/bin:$PATH; python3 -m bench.chip.tpu_seed --results $OUT --parity-site /tmp/site-parity 2>&1 | tee $OUT/tpu_seed.log
CMD
}

stamp() { # what the stand-in was built from: these lists and the carried wheels' names
  printf '%s\n' "${CARRIED[@]}" "${TRAIN_INDEX[@]}" "${PARITY_INDEX[@]}" "$TORCH" "${JAX_BASE[@]}" "$index" |
    cat - <(ls "$wheels" 2>/dev/null) | sha256sum | cut -c1-16
}

fetch() {
  if [[ -x "$venv/bin/python" && -f "$venv/.tpu-seed-stamp" && "$(cat "$venv/.tpu-seed-stamp")" == "$(stamp)" ]]; then
    echo "tpu_wheels: $venv and $wheels are up to date"
    echo "device command ($(command_line | tr -d '\n' | wc -c) characters), carry $CARRY:"
    command_line
    return 0
  fi
  mkdir -p "$wheels"
  rm -f "$wheels"/*.whl # exactly the carried set: two versions of one package stop the whole install
  PIP_CONFIG_FILE=/dev/null python3 -m pip download -q --disable-pip-version-check --no-deps \
    --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --index-url https://pypi.org/simple -d "$wheels" "${CARRIED[@]}"
  echo "tpu_wheels: $(du -sh "$wheels" | cut -f1) of wheels in $wheels"

  # the stand-in: a venv with the device's JAX stack alone, then exactly the device's installs
  [[ -x "$venv/bin/python" ]] || python3.11 -m venv "$venv"
  PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install --isolated --disable-pip-version-check -q \
    --only-binary=:all: --index-url "$index" "${JAX_BASE[@]}"
  rm -rf "$venv/site" "$venv/site-parity"
  PYTHON="$venv/bin/python" install "$venv/site"
  PYTHON="$venv/bin/python" install_parity "$venv/site-parity"
  stamp >"$venv/.tpu-seed-stamp"
  echo "tpu_wheels: $venv stands in for the device (PYTHONPATH=$venv/site:$repo, PATH=$venv/site/bin:\$PATH)"
  echo
  echo "device command ($(command_line | tr -d '\n' | wc -c) characters), carry $CARRY:"
  command_line
}

case "${1:-}" in
  fetch) fetch ;;
  install) install "${2:-}" ;;
  install-parity) install_parity "${2:-}" ;;
  command)
    echo "carry: $CARRY"
    command_line
    ;;
  *)
    echo "usage: bench/setup/tpu_wheels.sh fetch | install [SITE] | install-parity [SITE] | command" >&2
    exit 2
    ;;
esac
