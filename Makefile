# olmax: every target runs its setup first; setup is idempotent (re-installs only when pyproject.toml changes).
# Two levels: `setup-base` installs the package alone (what `olmax demo` runs: JAX, grain, datasets, the
# tokenizers, matplotlib), `setup` adds the test extra on top (torch, transformers, OLMo-core, lm-eval, Beam,
# pytest, ruff: the references the tests compare against, a 2.9 GB environment the demo never imports).
PY      := .venv/bin/python
BASE    := .venv/.olmax-base-installed
STAMP   := .venv/.olmax-installed
OUT     ?= demo-out

.PHONY: setup setup-base demo test test-slow test-all bench lint lock

setup-base: $(BASE)

setup: $(STAMP)

# constraints.txt holds one resolved version of every package: pip alone cannot resolve the test extra from
# scratch (its resolver backtracks until it gives up, docs/design.md).
# (setup.py and olmax/data/jsonl_scan.c: a change to the compiled reader is built again)
$(BASE): pyproject.toml constraints.txt setup.py olmax/data/jsonl_scan.c
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e .
	touch $(BASE)

$(STAMP): $(BASE)
	# torch is pinned: the CPU build of 2.13.0 is what this machine serves; an unpinned torch pulls CUDA.
	$(PY) -m pip install -q 'torch==2.13.0'
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	# the report's browser test drives Debian's chromium through Playwright (tests/demo/test_report_browser.py)
	test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
		|| echo "setup: could not install chromium (apt-get install chromium); the browser test will fail" >&2
	touch $(STAMP)

demo: setup-base
	.venv/bin/olmax demo --out $(OUT)

# `test` leaves out the slow tests (pyproject's addopts: -m 'not slow'); `test-slow` runs only those and
# `test-all` (what CI runs, .ci/run) runs everything. pytest's exit code 5 (no test selected) is not a failure.
test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow --durations=15 || test $$? -eq 5

test-all: setup
	$(PY) -m pytest -q -m 'slow or not slow' --durations=25 || test $$? -eq 5

bench: setup
	$(PY) -m bench.peers.prepare
	$(PY) -m bench.peers.beam_parity
	$(PY) -m bench.peers.loader
	$(PY) -m bench.peers.forward
	$(PY) -m bench.peers.train_step
	$(PY) -m bench.peers.audit
	$(PY) -m bench.studies.leak_calibration

lint: setup
	.venv/bin/ruff check olmax tests bench
	.venv/bin/ruff format --check olmax tests bench

# after changing pyproject.toml's dependencies: install the new set into .venv (pip install -e '.[test]' with
# the changed pins), check it (make test-all), then write what is installed as the new constraints.txt
lock:
	{ sed -n '1,3p' constraints.txt; $(PY) -m pip list --format=freeze --exclude-editable --exclude pip --exclude setuptools; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
