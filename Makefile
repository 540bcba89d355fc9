# kiln: `make setup` builds everything from nothing; `make demo` is the main job; `make test` the tests.
SHELL := /bin/bash
.DEFAULT_GOAL := demo

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Debian packages the project needs: Slurm's client for the launcher's hostlist tests (the local
# cluster adds the Slurm daemons and munge), gpg for the test that checks repository keys with the real
# thing, Prometheus (promtool and the server) for the tests of the agent's configuration, python3-venv for the venv it makes. npm (any Node) only bootstraps the pinned Node 22, so Debian's nodejs/npm are installed only
# when no npm is on PATH at all. The local cluster's code-server install (kiln's install_code_server step) downloads
# with curl and builds VS Code's native modules with build-essential, pkg-config and libkrb5-dev (Kerberos headers).
DEBIAN_PACKAGES ?= slurm-client gpg prometheus python3-venv curl build-essential pkg-config libkrb5-dev systemd
NODE_PACKAGES ?= nodejs npm

# ParallelCluster's official config schema, at the version kiln's construct pins (its one place).
# It installs without its dependencies, which would pull CDK v1 and an old jsii next to aws-cdk-lib 2.
PCLUSTER_VERSION := $(shell sed -n 's/^PARALLELCLUSTER_VERSION = "\(.*\)"/\1/p' kiln/constructs/parallelcluster.py)

# checkov, the second IaC scanner `kiln report` runs, lives in its own venv: it pins boto3 and packaging
# versions the project's own environment (moto, cfn-lint) has moved past. $(BIN)/checkov links to it, at the
# version kiln/review/scan.py expects (its one place).
CHECKOV_VERSION := $(shell sed -n 's/^CHECKOV_VERSION = "\(.*\)"/\1/p' kiln/review/scan.py)
CHECKOV_VENV ?= .venv-checkov

# The pinned Node 22 and the venv come first for the commands below. kiln picks its Node itself
# (kiln/host/node_runtime.py), and cdk.json runs app.py with .venv's Python through ./venv-python.
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(BIN):$(PATH)

.PHONY: setup system-deps demo test test-slow lint typecheck bench bench-resilience clean

setup: system-deps $(BIN)/.installed $(BIN)/checkov node_modules/.installed

system-deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done; \
	  command -v npm >/dev/null || echo $(NODE_PACKAGES)); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing Debian packages (install as root): $$missing"; exit 1; fi; \
	fi

$(BIN)/.installed: pyproject.toml kiln/constructs/parallelcluster.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[launcher,dev]'
	$(BIN)/pip install --quiet --no-deps aws-parallelcluster==$(PCLUSTER_VERSION)
	touch $@

$(BIN)/checkov: $(BIN)/.installed kiln/review/scan.py
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet checkov==$(CHECKOV_VERSION)
	ln -sfn $(abspath $(CHECKOV_VENV))/bin/checkov $@
	touch $(CHECKOV_VENV)/bin/checkov  # make reads the link's time from its target

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The main job: a real 2-node Slurm cluster on this machine (root), the launcher's smoke job
# across it, the synth + lint table of every example, and the cluster taken down again
# (also when smoke or the table fails).
demo: setup
	$(BIN)/kiln validate examples/*.yaml
	$(BIN)/kiln local up --nodes 2
	$(BIN)/kiln local smoke; status=$$?; \
	  $(BIN)/kiln report examples/*.yaml || status=1; \
	  $(BIN)/kiln local down; exit $$status

# The fast tier: what a developer runs after each change (3 minutes or less on 2 cores). The slow tier holds the
# end-to-end local clusters, every example's synthesis and the modules that take over 14 s; .ci/run runs both.
# pytest rewrites each test module's asserts on import (about 15 s of CPU for the suite); with bytecode writes on,
# it keeps the result in __pycache__ (git ignores it), so the next run, and the slow tier after the fast one, skip it
# even where the environment turns bytecode writes off (PYTHONDONTWRITEBYTECODE).
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 -q --dist loadfile

test: setup
	$(PYTEST) -m "not slow and not e2e"

test-slow: setup
	$(PYTEST) -m "slow or e2e"

lint: typecheck
	$(BIN)/ruff check .
	$(BIN)/kiln report --no-lint examples/*.yaml >/dev/null

# mypy, strict on the packages and modules pyproject.toml's [tool.mypy] names (kiln.contracts, kiln.spec,
# kiln.constructs, kiln.aws and the AWS callers that pass it), with boto3's stubs (dev dependencies).
typecheck: setup
	$(BIN)/mypy

bench: setup
	$(BIN)/python benchmarks/synth_examples.py

# Recovery on the real local cluster (root): a node broken three ways under a 3-node smoke job (docs/resilience.md).
bench-resilience: setup
	$(BIN)/python benchmarks/resilience.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) node_modules cdk.out .pytest_cache
