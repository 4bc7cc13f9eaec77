# The README's commands. `run` and `test` do their own setup on a fresh machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# checkov (tests/infra/test_checkov.py) pins boto3==1.35.49, networkx<2.7 and packaging<24,
# which conflict with pyproject.toml's pins, so it gets a venv of its own. The stamp carries the
# version: changing CHECKOV_VERSION reinstalls it.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup system test test-fast flake-hunt lint run synth bench layer requirements-layer \
	clean

setup: system $(VENV)/.installed node_modules/.installed $(CHECKOV_STAMP)

# Debian packages the suite needs (redis-server for the TLS + cluster tests, npm, binutils).
system:
	@bash scripts/install-system-deps.sh

# torch 2.13.0 comes first, alone and without its dependencies: from a CPU wheel that pip's own
# configuration already offers (--no-index: a find-links folder), else from the PyTorch CPU wheel
# index; the default index (PyPI) serves multi-GB CUDA builds for Linux on both arches. Its
# dependencies come from the default index with the rest. Without --no-deps, pip asks the CPU index
# for each of them too, and where that index is out of reach every one costs five retries.
# Override with TORCH_INDEX_URL=... .
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
export TORCH_INDEX_URL
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q --no-deps --no-index torch==2.13.0 2>/dev/null \
		|| $(PIP) install -q --no-deps torch==2.13.0 --index-url $(TORCH_INDEX_URL)
	$(PIP) install -q -e '.[dev]'
	@touch $@

$(CHECKOV_STAMP):
	@test -x $(CHECKOV_VENV)/bin/python || python3 -m venv $(CHECKOV_VENV)
	@printf '*\n' > $(CHECKOV_VENV)/.gitignore  # keeps the venv out of git
	$(CHECKOV_VENV)/bin/pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/pip install -q checkov==$(CHECKOV_VERSION)
	@rm -f $(CHECKOV_VENV)/.installed-*
	@touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	PYTHONPATH=functions:. $(VENV)/bin/lint-imports --no-cache

# Two passes: most of the suite on two xdist workers, then the timing-sensitive tests (marker
# serial: wall-clock budgets, CPU shares, shaped bandwidth) alone, with no other worker's load.
# Each recipe line is a new bash, so $$SECONDS is that pass's wall time; the pass still exits
# with pytest's own status (5: nothing collected fails too).
test: lint
	$(PY) -m pytest -m "not serial"; status=$$?; echo "parallel pass: $$SECONDS s"; exit $$status
	$(PY) -m pytest -m serial -n 0; status=$$?; echo "serial pass: $$SECONDS s"; exit $$status

# The cheap tier (docs/development.md): no servers, sandboxes, pip, local runs or timing tests
# (the cost marks of tests/costs.py), then tests/infra's checks of the templates its conftest
# synthesizes once per session. ruff and the import contracts but not mypy: a cold mypy alone
# takes 1.5 min of the 4 this target may take. FASDL_FAST_TIER: the search-equivalence
# properties at a quarter of their examples (tests/examples.py).
COSTLY := servers or sandbox or network or e2e or serial
TEMPLATE_TESTS := tests/infra/test_snapshots.py tests/infra/test_assertions.py \
	tests/infra/test_security_assertions.py \
	tests/infra/test_nag.py tests/infra/test_retention_and_region.py
test-fast: setup
	$(VENV)/bin/ruff check .
	PYTHONPATH=functions:. $(VENV)/bin/lint-imports --no-cache
	FASDL_FAST_TIER=1 $(PY) -m pytest -m "not ($(COSTLY) or synth)"; status=$$?; \
		echo "cheap tier: $$SECONDS s"; exit $$status
	$(PY) -m pytest -n 0 -m "not ($(COSTLY))" $(TEMPLATE_TESTS); status=$$?; \
		echo "infra templates: $$SECONDS s"; exit $$status

# The given test files (FILES; default: the parallel pass's heaviest) side by side, N rounds,
# no retries: a table of which failed in which round.
N ?= 3
flake-hunt: setup
	N=$(N) bash scripts/flake_hunt.sh $(FILES)

# The local main job: plan, synth, local servers, the synthesized state machine, a report.
run: setup
	$(PY) -m local run --reference $(if $(PLAN),--plan $(PLAN),) $(if $(WORKLOAD),--workload $(WORKLOAD),)

# cdk.out is removed first: a synth that fails on a bad plan must not leave an older template
# behind that a later `cdk deploy` would pick up.
synth: setup
	rm -rf cdk.out
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH npx cdk synth --no-notices -q $(if $(PLAN),-c plan=$(PLAN),)

bench: setup
	$(PY) -m bench.planner_search
	$(PY) -m bench.planner_frontier
	$(PY) -m bench.channel
	$(PY) -m bench.step_overhead
	$(PY) -m bench.prediction
	$(PY) -m bench.patterns
	$(PY) -m bench.cache_scaling
	$(PY) -m bench.cold_start
	$(PY) -m bench.fuzz_inputs
	$(PY) -m bench.memory_roles --workload squeezenet-cifar10
	$(PY) -m bench.memory_roles --workload resnet50-cifar10 --workload mobilenet-cifar10 --batch 2 --slope
	$(PY) -m bench.chaos
	$(PY) -m bench.orchestration

# The torch layer for `cdk deploy` (torch.tar.zst + loader; 6-10 min at zstd -19).
layer: setup
	$(PY) layers/torch/build.py --function-dir functions $(if $(ARCH),--arch $(ARCH),) \
		$(if $(WHEEL),--wheel $(WHEEL),)

# The layer of a workload's own packages (workload.requirements), after `make layer`.
requirements-layer: setup
	$(PY) layers/torch/requirements_layer.py --requirements $(REQUIREMENTS)

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache
