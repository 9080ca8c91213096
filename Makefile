# The README's commands. Every target sets up .venv first (idempotent).
VENV   ?= .venv
PY     := $(VENV)/bin/python
HETC   := $(VENV)/bin/hetc
STAMP  := $(VENV)/.hetc-setup

.PHONY: setup run test test-slow bench browser clean

setup: $(STAMP)

# torch first and pinned: an unpinned torch pulls several GB of CUDA wheels.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[plot,test,compile]"
	# torch-mlir's wheel declares no torch: --no-deps keeps pip from pulling another one
	$(PY) -m pip install -q --no-deps torch-mlir==20261001
	# the hetc.* tree package-dir describes, as links under .venv/typing, for type checkers and IDEs
	# (the editable install's import hook is invisible to them); `make test` rebuilds it each run
	$(PY) tools/typecheck.py --tree-only
	touch $(STAMP)

run: setup
	$(HETC) plan --profiles examples/mixed-rack.yaml llama-3.1-70b -o out/plan.json

# Lint and format-check the whole repo;
# type-check every hetc.* package, hetc/ and the folders mapped into it (tools/typecheck.py); pytest
# on two workers for the two cores, a test file on one worker (its module fixtures — a served
# process, a capture — are built once).
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/typecheck.py
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not serial"
	$(PY) -m pytest -q -m "serial and not slow"

# The tests marked slow (multi-process serving, compiled stages, fuzzing, the browser test), split as `test` splits:
# two workers, a file on one worker, then the serial (wall-clock) ones alone. Both parts run (a part takes
# many minutes: one run reports every failure); the target fails if either did.
test-slow: setup browser
	$(PY) -m pytest -q -n 2 --dist loadfile -m "slow and not serial"; parallel=$$?; \
	$(PY) -m pytest -q -m "slow and serial"; serial=$$?; \
	test $$parallel -eq 0 && test $$serial -eq 0

# each script records its rows in benchmarks/results/*.json; tables.py redraws BENCHMARKS.md's tables from them
bench: setup
	$(PY) benchmarks/inspect_speed.py --record
	$(PY) benchmarks/solver_scenarios.py --record
	$(PY) benchmarks/tables.py

# Debian's chromium, for the slow suite's browser test of `hetc compare --html` (it fails under CI=true without it)
browser:
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

clean:
	rm -rf $(VENV) out
