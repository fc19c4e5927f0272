# Two entry points: `make demo` (the main job) and `make test` (ruff, then the test suite); `make docs`
# builds the documentation site (mkdocs, strict: a broken link fails).  All set up .venv themselves
# (idempotent); torch is pinned by constraints.txt to the CPU build.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: setup demo lint test docs bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e ".[test,docs]"
	touch $(DOCS_STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/ptm demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# the linter first: a finding fails the run before the slow tests
test: $(STAMP) lint
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest -m "not slow" tests

# the site from README-linked pages in docs/ and the docstrings (mkdocstrings) into site/
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_transformer.py

clean:
	rm -rf $(VENV) build site *.egg-info
