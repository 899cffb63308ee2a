# make test: create .venv if missing, install the pinned torch + vspec[dev], run the tests.
# make demo: build and profile every preset in specs/ and print one table.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: test demo bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(PINS)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]' $(PINS)
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(PY) tools/demo.py

bench: $(STAMP)
	$(PY) benchmarks/models.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
