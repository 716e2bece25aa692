# One entry point for people and CI. Every target installs what it needs first:
# a virtualenv in .venv (requirements.txt) and pinned helm 3 and 4 in .tools/helm.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HELM_VERSIONS := 3.17.2 4.1.4
HELM ?= .tools/helm/4.1.4/helm
CT_TARGET_BRANCH ?= main
CHECKOV_STAMP := .tools/checkov/.installed

.PHONY: help tools helm render test golden docs lint clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e .
	touch $@

$(CHECKOV_STAMP): requirements-checkov.txt
	$(PYTHON) -m venv .tools/checkov
	.tools/checkov/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

helm: ## Install the pinned helm binaries (checksummed) into .tools/helm.
	scripts/install-helm.sh $(HELM_VERSIONS)

tools: $(STAMP) $(CHECKOV_STAMP) helm ## Install everything the other targets need.

render: tools ## Render the chart with its defaults, validate it, write out/ and print a summary.
	$(PY) -m mooncake_pd --helm $(HELM) render --out out/mooncake-pd.yaml

test: tools ## Run the whole test suite (helm 3 and helm 4).
	$(PY) -m pytest

golden: tools ## Regenerate tests/golden/ from the chart; read the diff before committing.
	$(PY) -m mooncake_pd --helm $(HELM) golden
	git diff --stat -- tests/golden

docs: tools ## Regenerate the README values table from chart/values.schema.json.
	$(PY) -m mooncake_pd docs

lint: tools ## What ct lint does, locally: helm lint --strict per chart/ci file under helm 3 and 4, yamllint, Chart.yaml and version bump; plus ruff.
	$(VENV)/bin/ruff check scripts tests
	$(VENV)/bin/ruff format --check scripts tests
	$(VENV)/bin/yamllint --strict .
	for v in $(HELM_VERSIONS); do for f in chart/ci/*-values.yaml; do \
	  .tools/helm/$$v/helm lint --strict chart --values $$f || exit 1; done; done
	$(PY) -m mooncake_pd chartcheck --base $(CT_TARGET_BRANCH)

clean: ## Remove the virtualenv, tools and outputs.
	rm -rf $(VENV) .tools out
