# Set-up and checks. `make test` works on a fresh clone: it builds .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned to the CUDA build this project is tested with (it runs on the CPU too);
# then the project with its dev extras.
TORCH := torch==2.14.1 torchvision==0.29.1

.PHONY: setup test lint format demo tour dashboard screenshots bench bench-full bench-self bench-kernel bench-pipeline clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# Lint, then the tests; Triton kernels run in the interpreter where there is no GPU
# (tests/conftest.py sets TRITON_INTERPRET=1 then; GPU tests are skipped).
test: setup lint
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The main job: the quick suite on the last 3 commits here (GPU suite, or the CPU subset),
# ingested into results/perf.duckdb, and the gate report of HEAD against its parent.
demo: setup
	$(BIN)/python -m scripts.demo

# The dashboard over the store (make demo fills it): http://localhost:8501
STORE ?= results/perf.duckdb
dashboard: setup
	$(BIN)/python -m streamlit run dashboard/app.py --browser.gatherUsageStats false -- --store $(STORE)

# docs/dashboard/*.png from a store of 1,000 synthetic commits, and the first page's time in
# chromium (needs /usr/bin/chromium: apt-get install chromium)
screenshots: setup
	$(BIN)/python -m scripts.screenshots --out docs/dashboard

# The library on this machine in under a minute: backends against the oracle, pack/unpack,
# the pruned pipeline, and on a GPU the dispatch floor.
tour: setup
	$(BIN)/python -m scripts.tour

# The asv suite on HEAD in the current environment, into .asv/results (GPU benchmarks are
# skipped without a GPU; the CPU subset runs instead). Quick: pull requests (~3 min on the
# H100, ~1.5 min on a 2-core CPU machine). Full: main (~9 min on the H100). COMMITS picks others.
COMMITS ?= HEAD
bench: setup
	$(BIN)/python -m ragbench run --mode quick $(COMMITS)

bench-full: setup
	$(BIN)/python -m ragbench run --mode full $(COMMITS)

# The suite's own speed (pytest-benchmark: ingest rows/s, the gate's comparison, detection,
# the dashboard's queries on a store of 1,000 synthetic commits), ingested like any result.
bench-self: setup
	mkdir -p results
	$(BIN)/python -m pytest selfbench -q -p no:cacheprovider --benchmark-json results/selfbench.json
	$(BIN)/python -m ragbench ingest results/selfbench.json

# The kernel timing table of ../shared/design.md's metrics (needs a CUDA GPU).
bench-kernel: setup
	$(BIN)/python -m scripts.kernel_bench --out results/kernel

# End-to-end pipeline img/s, stage times and numeric drift (needs a CUDA GPU; ~3 min on an H100).
bench-pipeline: setup
	$(BIN)/python -m scripts.pipeline_bench --out results/pipeline

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache results .asv
