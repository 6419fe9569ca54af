# Two commands for a fresh machine: `make demo` and `make test`. Each installs what it needs into .venv:
# the demo gpuc's runtime dependencies and what the demo and the rehearsals run on (pyproject's [rehearse]: the
# loopback ssh and S3 servers), the tests those plus the test tools (pyproject's [test]).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
HASH := $(shell cksum pyproject.toml | cut -d' ' -f1)
RUN_STAMP := $(VENV)/.run-$(HASH)
TEST_STAMP := $(VENV)/.test-$(HASH)
MYPY_ROOT := $(VENV)/mypy-root

.PHONY: demo test checks quick lint typecheck unit oldest bench hostile mutants clean live browser

$(PY):
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[rehearse]'
	rm -f $(VENV)/.run-*
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(PIP) -e '.[test]'
	rm -f $(VENV)/.test-*
	touch $@

# The tests and the demo write their bytecode, whatever this environment says (PYTHONDONTWRITEBYTECODE): every
# `gpuc` and pod agent the suite starts (about a thousand) would otherwise compile gpuc's modules from source again.
unexport PYTHONDONTWRITEBYTECODE

demo: $(RUN_STAMP)
	$(VENV)/bin/gpuc demo

# The unit run holds the terminal while lint, typecheck and the oldest Python's run go on beside it (make -j2): it
# waits on processes and sockets most of its time, and they fill the core it leaves. Their output is printed after
# its, whole (.venv/checks.log); any part that fails fails `make test`, and Ctrl-C stops them all (one make).
CHECKS_LOG := $(VENV)/checks.log
test: $(TEST_STAMP)
	@$(MAKE) -j2 --no-print-directory unit checks; rc=$$?; \
	echo "== lint, typecheck, oldest (run beside the unit tests) =="; cat $(CHECKS_LOG); exit $$rc

checks: $(TEST_STAMP)
	@$(MAKE) -k --no-print-directory lint typecheck oldest > $(CHECKS_LOG) 2>&1 || \
		{ echo "lint, typecheck or oldest FAILED: their output follows the unit tests'"; exit 1; }

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# mypy needs to see the repo as the package `gpuc` (the root folder is the package). The tests and bench/
# are checked too, one folder at a time, each as pytest imports it: the folder and tests/ on the path
# (several folders have their own conftest.py; the fakes are the package tests/fakes, checked once as `fakes`), and
# tests/functions, which the conftest of tests/aws adds (test_actions_aws.py imports test_phone_taps).
# Then the pod's modules again as python 3.9 sees them (mypy-pod.ini), with a mypy 1.x of its own (mypy 2 targets
# 3.10 at the oldest); the module list is the bundle's own (client/onpod/bundle.py).
POD_MYPY_VENV := $(VENV)/pod-mypy
POD_MYPY_STAMP := $(POD_MYPY_VENV)/.mypy-1
$(POD_MYPY_STAMP):
	$(PYTHON) -m venv $(POD_MYPY_VENV)
	$(POD_MYPY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'mypy>=1.10,<2'
	touch $@

typecheck: $(TEST_STAMP) $(POD_MYPY_STAMP)
	mkdir -p $(MYPY_ROOT) && ln -sfn $(CURDIR) $(MYPY_ROOT)/gpuc
	cd $(MYPY_ROOT) && MYPYPATH=$(CURDIR)/$(MYPY_ROOT) $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml \
		-p gpuc.core -p gpuc.client -p gpuc.functions -p gpuc.instance_side -p gpuc.testkit
	cd $(MYPY_ROOT) && $(CURDIR)/$(POD_MYPY_VENV)/bin/mypy --config-file $(CURDIR)/mypy-pod.ini \
		--python-executable $(CURDIR)/$(PY) $$($(CURDIR)/$(PY) -m gpuc.client.onpod.bundle --mypy-modules)
	MYPYPATH=$(CURDIR)/$(MYPY_ROOT):$(CURDIR)/tests $(PY) -m mypy --config-file pyproject.toml -p fakes
	for d in tests tests/*/ bench; do d=$${d%/}; [ "$$d" != tests/fakes ] || continue; \
		[ -n "$$(ls $$d/*.py 2>/dev/null)" ] || continue; \
		MYPYPATH=$(CURDIR)/$(MYPY_ROOT):$(CURDIR)/tests:$(CURDIR)/$$d:$(CURDIR)/tests/functions \
		$(PY) -m mypy --config-file pyproject.toml $$d/*.py || exit 1; done

# The suite in parallel (pytest-xdist): most tests wait on processes and sockets (their wall clock adds up to
# twice their CPU), so four workers beat two cores. worksteal: a worker that runs dry takes from another, so the
# few long tests do not end last.
WORKERS ?= 4
XDIST := -n $(WORKERS) --dist worksteal

unit: $(TEST_STAMP) browser
	$(VENV)/bin/pytest $(XDIST)

# A developer's loop: everything but the end-to-end tests (the demo, the drill, rehearsals), in parallel.
quick: $(TEST_STAMP)
	$(VENV)/bin/pytest $(XDIST) -m 'not slow and not live and not e2e'

# The oldest Python requires-python admits, as Debian 12 ships it (/usr/bin/python3.11, 3.11.2: no tarfile
# extraction filter, which gpuc must never need): the tests of what gpuc copies off a pod and unpacks onto
# one run there too, in a venv of their own under .venv. Said and skipped where that Python is absent.
OLDEST_PYTHON ?= /usr/bin/python3.11
OLDEST_VENV := $(VENV)/oldest
# In parallel as the unit tests run (most of them wait on a `gpuc` process): pytest-xdist, named in the stamp so a
# venv made before it is made again.
OLDEST_STAMP := $(OLDEST_VENV)/.test-xdist-$(HASH)
OLDEST_TESTS := tests/core/test_untar.py tests/client/test_results.py tests/client/test_cp.py \
	tests/client/test_upload.py tests/instance_side/test_pod_ask.py

$(OLDEST_STAMP): pyproject.toml
	$(OLDEST_PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e . pytest pytest-xdist hypothesis moto
	rm -f $(OLDEST_VENV)/.test-*
	touch $@

oldest:
	@if [ ! -x $(OLDEST_PYTHON) ]; then \
		echo "oldest: skipped: no $(OLDEST_PYTHON) here (the copy tests ran only on $$($(PYTHON) -V))"; exit 0; fi; \
	$(MAKE) --no-print-directory $(OLDEST_STAMP) && echo "oldest: $$($(OLDEST_VENV)/bin/python -V)" && \
	$(OLDEST_VENV)/bin/python -m pytest -n 2 --dist worksteal $(OLDEST_TESTS)

# tests/browser drives Debian's headless Chromium: installed here where it is missing and this can (root,
# apt), a no-op once it is there. Where it cannot, pytest's summary says so in capitals with the command.
APT_CHROMIUM := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium for the browser tests (once)"; \
		{ $(APT_CHROMIUM) >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && $(APT_CHROMIUM) >/dev/null 2>&1; }; } \
		|| echo "COULD NOT INSTALL CHROMIUM: the browser tests will be skipped (apt-get install -y chromium chromium-driver)"; \
	else echo "NO CHROMIUM: the browser tests will be skipped; as root: apt-get install -y chromium chromium-driver"; fi

bench: $(RUN_STAMP)
	$(PY) bench/run.py

# Read-only contract tests against the real provider APIs (tests/live): only with a key in the environment
# or .env; `make test` never runs them.
live: $(TEST_STAMP)
	@if [ -z "$$RUNPOD_API_KEY$$VAST_API_KEY" ] && ! grep -qsE '^(RUNPOD|VAST)_API_KEY=.' .env; then \
		echo "live: skipped: no RUNPOD_API_KEY or VAST_API_KEY in the environment or .env"; \
	else GPUC_LIVE=1 $(VENV)/bin/pytest -rs -m live tests/live; fi

hostile: $(TEST_STAMP)
	GPUC_HOSTILE_EXAMPLES=10000 $(VENV)/bin/pytest -m slow tests

# The hand mutants of issue 17 (tests/mutants/table.py): each breaks one safety check, and a named test
# must fail on it; then the tests of its whole folder run on it too (the suite's score, printed beside the
# table's). Two pytest runs per mutant (hours for all), so not part of `make test`; refuses a dirty tree
# and puts every file back. A sample: `make mutants MUTANTS_ARGS='--sample 12 --seed 1'`.
MUTANTS_ARGS ?=
mutants: $(TEST_STAMP)
	$(PY) tests/mutants/run.py $(MUTANTS_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
