# Living Memory — every set-up step lives here. `make run` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
PORT ?= 8000

.PHONY: install run materialize serve ui test test-unit lint bench clean

install: $(STAMP)

# torch is pinned and installed first: an unpinned torch (pulled in by sentence-transformers) is a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[dev,geo,documents,postgres,chroma]"
	touch $(STAMP)

$(DAGSTER_HOME)/dagster.yaml: deploy/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp deploy/dagster.yaml $(DAGSTER_HOME)/dagster.yaml

# Build (or update) the index from the sources file ($RAG_SOURCES, default: the bundled example), publish it, serve it
# with the Dagster daemon beside the app (`livemem up`: the nightly rollup and personal-memory schedules run; Ctrl-C
# stops both; `livemem status` says whether the daemon is alive).
run: install $(DAGSTER_HOME)/dagster.yaml
	$(MAKE) --no-print-directory materialize
	@if [ -f serving/app.py ]; then $(BIN)/livemem up --host $${HOST:-127.0.0.1} --port $(PORT) \
		--workers $${WORKERS:-1} --worker-healthcheck-s $${WORKER_HEALTHCHECK_S:-60}; \
	else echo "Index published under $${RAG_INDEX_DIR:-rag_index}/ (CURRENT names the version)."; fi

# Every part of the index, each checked and published in turn: chunks, spatial entities, the registry; it ends with
# every check that failed (exit 1: a run failed, or an ERROR check did).
materialize: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/livemem materialize --job build_index --job export_gbim --job verify_registry

serve: install
	$(BIN)/uvicorn serving.app:app --host $${HOST:-127.0.0.1} --port $(PORT) --workers $${WORKERS:-1} \
		--timeout-worker-healthcheck $${WORKER_HEALTHCHECK_S:-60} --no-access-log

ui: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -m orchestration.definitions -h 127.0.0.1 -p $${DAGSTER_PORT:-3000}

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# The unit layer without the embedding model: seconds, for the edit-test loop (tests/conftest.py: the layers).
test-unit: install
	$(BIN)/python -m pytest tests/unit -m "not model" -q

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

# SciFact: build speed (full, no-op, incremental), retrieval quality and HTTP latency of the serving app, then the
# other parts; living memory's gain, the cost of a change as the corpus grows, and the differential test run long.
bench: install
	$(BIN)/python -m bench.scifact_build --repeats 2
	$(BIN)/python -m bench.serving_index
	$(BIN)/python -m bench.serving_quality
	$(BIN)/python -m bench.serving_latency --workers 2
	$(BIN)/python -m bench.attention_rollup
	$(BIN)/python -m bench.registry_bench
	$(BIN)/python -m bench.gbim_bench
	$(BIN)/python -m bench.context_latency
	$(BIN)/python -m bench.scaleout
	$(BIN)/python -m bench.memory_helps
	$(BIN)/python -m bench.scale --sizes 2500,25000
	$(BIN)/python -m bench.differential --examples 60

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
