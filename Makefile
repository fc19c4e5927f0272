# Two entry points: `make demo` (the main job) and `make test` (ruff, then the test suite).
# Both set up .venv themselves (idempotent); torch is pinned by constraints.txt to the CPU build.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo lint test bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/ptm demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# the linter first: a finding fails the run before the slow tests
test: $(STAMP) lint
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest -m "not slow" tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_transformer.py

clean:
	rm -rf $(VENV) build *.egg-info
