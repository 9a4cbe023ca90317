# Set-up and checks. `make test` works on a fresh clone: it builds .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch pinned to the CUDA build this project is tested with (it runs on the CPU too), and the
# project with its dev extras.
TORCH := torch==2.14.1 torchvision==0.29.1

.PHONY: setup test lint format demo tour dashboard screenshots bench bench-full bench-self bench-kernel bench-pipeline browser postgres store-maintain bench-main bench-summary gate gate-pr gate-approve gate-sandbox gate-verdict gate-accept trust rehearse clean

# The stamp is named by pyproject.toml's content, not dated by it: a fresh checkout dates
# every file now, which would rebuild a .venv that CI restored from its cache.
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)
# scripts/install.py: uv installs what pip would (pip's settings, pip's choice), unpacking and
# compiling on both cores; pip, then compileall, where uv cannot.
$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m scripts.install $(TORCH) -e '.[dev]'
	rm -f $(VENV)/.installed*
	touch $@

setup: $(STAMP)

# Lint, then the tests; Triton kernels run in the interpreter where there is no GPU
# (tests/conftest.py sets TRITON_INTERPRET=1 then; GPU tests are skipped).
# Three workers on two cores (tests/conftest.py: whole files each): the rehearsal runs beside
# the rest. Two used 132% of the CPU on an idle machine (tests wait on subprocesses, servers and
# timeouts), three 181%: a fresh clone's .ci/run took 13 min 36 s idle (20 min 14 s with two,
# before the interpreter's fp32 tile grew to 64x64).
test: setup lint postgres
	$(BIN)/python -m pytest -q -n 3 --no-loadscope-reorder

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
# (also when the workflow passes an empty variable; a lake string is quoted where it is used)
STORE := $(or $(STORE),results/perf.duckdb)
# POLICIES: the policies file the pages judge by (as every ragbench command's --policies)
POLICIES ?=
dashboard: setup
	$(BIN)/python -m dashboard --store "$(STORE)" $(if $(POLICIES),--policies "$(POLICIES)")

# docs/dashboard/*.png from a store of 1,000 synthetic commits, and the first page's time in
# chromium (needs /usr/bin/chromium: apt-get install chromium)
screenshots: setup
	$(BIN)/python -m scripts.screenshots --out docs/dashboard

# The library on this machine in under a minute: backends against the oracle, pack/unpack,
# the pruned pipeline, and on a GPU the dispatch floor.
tour: setup
	$(BIN)/python -m scripts.tour

# The asv suite on HEAD in the current environment, into results/asv (GPU benchmarks are
# skipped without a GPU; the CPU subset runs instead). Quick: pull requests (~1.5 min on the
# H100 or on a 2-core CPU machine). Full: main (~9 min on the H100). COMMITS picks others.
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

# --- what the GitHub workflows run (.github/workflows; docs/runner.md) ----------------------
# Debian's chromium for the dashboard's browser test, where it is missing.
browser:
	command -v chromium >/dev/null || { S=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$S apt-get update -qq && $$S apt-get install -y -qq chromium >/dev/null; }

# Debian's PostgreSQL for the lake tests (they start their own server in a temporary
# directory), where it is missing.
postgres:
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  S=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$S apt-get update -qq && $$S apt-get install -y -qq postgresql >/dev/null; }

# The trusted jobs' tripwire (ragbench/trust.py; docs/runner.md): exit 2 when the environment,
# the home or this checkout holds what a pull request's job could have planted. The system's
# python3, before the .venv is built or used (pip would read a planted pip.conf), without the
# user site or PYTHON* settings (-s -E: a planted .pth would run first). In a GitHub job every
# trusted target below runs it first (TRUST); `make trust` runs it anywhere.
trust:
	$(PYTHON) -s -E -m ragbench.trust check --list --workspace .
TRUST := $(if $(GITHUB_ACTIONS),trust)

# GPU_LOCK (the runner's RAGBENCH_GPU_LOCK, a file root owns): the jobs that measure take it, so
# the trusted runner's and the sandbox runner's jobs never measure on one GPU at once.
GPU_LOCK ?= $(RAGBENCH_GPU_LOCK)
LOCKED = $(if $(GPU_LOCK),flock '$(GPU_LOCK)')

# BENCH (regexes, as asv run --bench) narrows bench-main and gate, ROUNDS sets the gate's
# alternating rounds (default: policies.toml); the workflows leave both empty, the test's
# short rehearsal (scripts/rehearse.py --bench) sets them to stay short.
BENCH ?=
BENCH_ARGS = $(foreach b,$(BENCH),--bench '$(b)')
ROUNDS ?=

# main: the full suite on main's first-parent commits of the push (BEFORE..AFTER) and any
# older ones the store lacks, each ingested into STORE as soon as it is measured; a snapshot
# for the artifact whatever happened. Exit 1 when a benchmark failed (stored as failed).
AFTER ?= HEAD
bench-main: $(TRUST) setup
	mkdir -p results
	$(LOCKED) $(BIN)/python -m ragbench record --store "$(STORE)" --after $(AFTER) \
	  $(if $(BEFORE),--before $(BEFORE)) --results results/asv $(BENCH_ARGS); \
	rc=$$?; if [ -f "$(STORE)" ]; then cp "$(STORE)" results/store-snapshot.duckdb; fi; exit $$rc

# main's history into the summary; a regression on main (exit 1) is reported, not a failure
# of the step, a detect that could not run (exit 2) is both (and says so in the summary).
SUMMARY ?= $(or $(GITHUB_STEP_SUMMARY),/dev/stdout)
bench-summary: $(TRUST) setup
	$(BIN)/python -m ragbench detect --store "$(STORE)" >> $(SUMMARY) || test $$? = 1

# pull requests: the gate on the merge base of BASE_SHA and HEAD_SHA against HEAD_SHA, into a
# scratch store (never STORE), which records it (what `ragbench gate --settle ID --store
# GATE_STORE`, the report's last command, continues); the report into the summary and
# results/gate.md, the verdict and failing cells into results/gate.json.
# Exit: make makes any failed recipe 2, a FAIL (ragbench's 1) as much as unusable input (2):
# ragbench's own code is left in GATE_RC (0 pass, 1 fail or inconclusive, 2 unusable), for a
# caller that tells them apart (`make gate || test "$(cat results/gate.rc)" = 1`).
BASE_SHA ?= HEAD~1
HEAD_SHA ?= HEAD
GATE_STORE ?= results/gate.duckdb
GATE_RC ?= results/gate.rc
GATE = rm -f $(GATE_RC); ( base=$$(git merge-base $(BASE_SHA) $(HEAD_SHA)) || exit 2; \
	$(BIN)/python -m ragbench gate --store $(GATE_STORE) --base $$base --head $(HEAD_SHA) \
	  --report results/gate.md --json results/gate.json $(BENCH_ARGS) \
	  $(if $(ROUNDS),--rounds $(ROUNDS)) ); rc=$$?; echo $$rc > $(GATE_RC)
gate: setup
	mkdir -p results
	$(GATE); exit $$rc

# What the sandbox runs: the pull request's own code (scripts/sandbox.py calls the pull
# request's `make gate-pr`). Exit 1 (it fails) is left to the trusted verdict, which knows the
# acceptances (this target exits 0, GATE_RC says 1); a gate that could not judge (2) fails
# the job.
gate-pr: setup
	mkdir -p results
	$(GATE); test $$rc = 0 || test $$rc = 1

# bench-pr's three jobs (docs/runner.md). approve (trusted): may this pull_request_target event
# (ACTION by SENDER, LABEL) run PR's code? Exit 1 when not, and a stale bench-gpu label comes
# off. gate-sandbox (the sandbox runner): the PR's head HEAD_SHA, fetched as data, gated by its
# own `make gate-pr` in the throwaway environment RAGBENCH_SANDBOX with this .venv read-only;
# its gate.json and gate.md copied into results/. The verdict is gate-verdict below.
gate-approve: $(TRUST)
	$(PYTHON) -s -E -m ragbench.trust approve --pr $(PR) --user "$$SENDER" --action "$$ACTION" \
	  $(if $(LABEL),--label "$$LABEL")

gate-sandbox: setup
	mkdir -p results
	$(LOCKED) $(PYTHON) -m scripts.sandbox --backend "$$RAGBENCH_SANDBOX" --pr $(PR) \
	  --base $(BASE_SHA) --head $(HEAD_SHA) --venv $(abspath $(VENV)) --out results

# The trusted jobs (the base branch's code, $GITHUB_TOKEN): the gate's artifact judged
# against the acceptances of HEAD_SHA, recorded in STORE (the gate `ragbench gate --settle`
# continues), posted as PR PR's comment and the ragbench/gate status; and the
# perf-regression-accepted label, added (or removed: LABEL_ACTION=unlabeled) by LABEL_USER,
# recorded if GitHub says LABEL_USER may write to the repository. gate-verdict holds the gate's
# base to the merge base of BASE_SHA and HEAD_SHA (git, here: the checkout's whole history),
# and its machine to RAGBENCH_MACHINE where that is set; it fails on failures not accepted
# (ragbench's 1) and on no usable gate output (2) alike: ragbench's code is left in VERDICT_RC.
VERDICT_RC ?= results/verdict.rc
gate-verdict: $(TRUST) setup
	mkdir -p results
	rm -f $(VERDICT_RC); $(BIN)/python -m ragbench verdict --github --store "$(STORE)" \
	  --gate-json results/gate.json --report results/gate.md --pr $(PR) --head $(HEAD_SHA) \
	  --base-sha $(BASE_SHA); rc=$$?; echo $$rc > $(VERDICT_RC); exit $$rc

gate-accept: $(TRUST) setup
	$(BIN)/python -m ragbench accept --store "$(STORE)" --pr $(PR) --head $(HEAD_SHA) \
	  --user $(LABEL_USER) $(if $(filter unlabeled,$(LABEL_ACTION)),--withdraw)

# store-maintain's job (weekly): a lake's small files merged, old snapshots expired, unread
# files deleted; a file store checkpointed (docs/store.md).
store-maintain: $(TRUST) setup
	$(BIN)/python -m ragbench store maintain --store "$(STORE)"

# bench-versions' job (weekly): the upgrade report of HEAD from the pinned stack (this .venv's
# torch and triton) to the newest torch release with the triton it pins, into the summary and
# results/versions.md. Not shown safe (exit 1) is the report's finding, not a failure of the
# step; a report that could not be made (2) is both.
FROM ?= pinned
TO ?= newest
VERSIONS_REPORT ?= results/versions.md
bench-versions: $(TRUST) setup
	mkdir -p $(dir $(VERSIONS_REPORT))
	$(LOCKED) $(BIN)/python -m ragbench versions --from $(FROM) --to $(TO) \
	  --report $(VERSIONS_REPORT) $(BENCH_ARGS) >> $(SUMMARY) || test $$? = 1

# The push and pull-request workflows' steps run here, in order, from a fresh clone, through
# a push and four pull-request events, with no GitHub (scripts/rehearse.py --help).
rehearse: setup
	$(BIN)/python -m scripts.rehearse $(BENCH_ARGS)

# The kernel timing table (docs/metrics.md defines its metrics; needs a CUDA GPU).
bench-kernel: setup
	$(BIN)/python -m scripts.kernel_bench --out results/kernel

# End-to-end pipeline img/s, stage times, numeric drift and the bound on any kernel's gain over
# fa2 (needs a CUDA GPU; ~7 min on an H100).
bench-pipeline: setup
	$(BIN)/python -m scripts.pipeline_bench --out results/pipeline

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache results .asv
