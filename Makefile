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

# Lint the whole repo; the formatter only where a file is kept formatted (add files as they are);
# type-check every hetc.* package, hetc/ and the folders mapped into it (tools/typecheck.py); pytest
# on two workers for the two cores, a test file on one worker (its module fixtures — a served
# process, a capture — are built once).
FORMATTED := hetc/__init__.py hetc/errors.py hetc/efficiency.py hetc/scheduling.py tests/unit_tests/test_fuzz_inputs.py \
             runtime/kvlinks.py runtime/openapi.py tests/fixtures/serving.py runtime/loading.py tests/unit_tests/test_runtime_loading.py \
             tests/unit_tests/test_sampler.py hetc/execution.py partitioner/capture/fusion.py tests/unit_tests/test_fusion.py \
             tests/unit_tests/test_simulate_steps.py benchmarks/public_gemm.py tests/unit_tests/test_profile_gemm_curves.py \
             hetc/serving.py runtime/serving_probe.py backends/rocm/iree_params.py backends/openvino/kernels.py \
             benchmarks/openvino_kernels.py tests/unit_tests/test_openvino_kernels.py tests/unit_tests/test_fidelity_steps.py \
             tests/unit_tests/test_profile_measured.py benchmarks/gpu_public_spread.py tools/typecheck.py tests/unit_tests/test_layers.py \
             tests/fixtures/stages.py tests/fixtures/fleets.py

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check $(FORMATTED)
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

bench: setup
	$(PY) benchmarks/inspect_speed.py
	$(PY) benchmarks/solver_scenarios.py

# Debian's chromium, for the slow suite's browser test of `hetc compare --html` (it fails under CI=true without it)
browser:
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

clean:
	rm -rf $(VENV) out
