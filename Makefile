# Two commands for a fresh machine: `make demo` and `make test`. Each installs what it needs into .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
MYPY_ROOT := $(VENV)/mypy-root

.PHONY: demo test lint typecheck unit bench hostile clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gpuc demo

test: lint typecheck unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# mypy needs to see the repo as the package `gpuc` (the root folder is the package).
typecheck: $(STAMP)
	mkdir -p $(MYPY_ROOT) && ln -sfn $(CURDIR) $(MYPY_ROOT)/gpuc
	cd $(MYPY_ROOT) && MYPYPATH=$(CURDIR)/$(MYPY_ROOT) $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml \
		-p gpuc.core -p gpuc.client -p gpuc.functions -p gpuc.instance_side -p gpuc.emulators

unit: $(STAMP)
	$(VENV)/bin/pytest

bench: $(STAMP)
	$(PY) bench/run.py

hostile: $(STAMP)
	GPUC_HOSTILE_EXAMPLES=10000 $(VENV)/bin/pytest -m slow tests

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
