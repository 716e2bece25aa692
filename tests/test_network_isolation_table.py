"""The chart's NetworkPolicies isolate a release as its threat model says, proven by a real
NetworkPolicy implementation: cyclonus v0.5.6's policy engine (cluster/policytable,
tests/support/policytable.py) answers, for every source around a release and every port of its
pods, whether the connection is allowed; the whole table must equal the one written here.

The threat model (docs/security.md, "Ports"; vLLM's docs/usage/security.md wants only the API port
reachable and the KV transfer on an isolated network, and the KV side channels and Mooncake's
transfer engine authenticate nobody):
- an engine's serving port (`server`: the OpenAI API and /metrics) only from the release's router
  (its proxy, or Kthena's router in Kthena's namespace), the KV canary (the helm test pod where
  it runs the canary, the CronJob's pods) and the scrapers the chart configures (the PodMonitor's
  Prometheus; Kthena's autoscaler where it reads pod metrics). Not the benchmark: it sends its
  load through the router (benchmark.baseUrl defaults to the router's URL);
- every other engine port (`dp-rpc`, `kv-*`, and `other`: ports no container declares, where
  Mooncake's transfer engine, NIXL/UCX and multi-node DP listen at random) only from this
  release's engines;
- the proxy's port from anyone while networkPolicy.proxyFrom is empty; otherwise from proxyFrom,
  the helm test pod (its chat test), the benchmark (its load) and, with metrics.podMonitor.proxy,
  Prometheus;
- a trusted caller outside the release's namespace is known by its namespace, not only by labels
  anyone can put on a pod: Kthena's router labels in the release namespace, or Prometheus' in
  another namespace, get nothing.

NetworkPolicy polices nothing on host-network pods, and the Ascend and NVIDIA profiles put the
engines there by default: the tables render `engine.hostNetwork: false` (allowed on Ascend, as
vLLM-Ascend's Kthena guide runs PD) or the cpu profile, whose engines are on the pod network; a
host-network render is refused (test_host_network_engines_are_refused). Each table is written to
out/network-isolation-table/<case>.md for reading.

Cost, measured on 2 cores: the module runs in about 3 s with its renders (helm 3 and 4), so it
stays in the gate; the program's build (about 100 s cold, 0 s reused) is `make cluster-tools`'s
(cluster/components.yaml, policytable).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess

import pytest

from mooncake_pd import paths
from support import policytable
from support.kube import build

OUT = paths.REPO / "out" / "network-isolation-table"
CPU = paths.CHART / "ci" / "cpu-values.yaml"
KTHENA = paths.CHART / "ci" / "kthena-router-values.yaml"
AUTOSCALING = paths.CHART / "ci" / "autoscaling-values.yaml"
# The engines on the pod network, where NetworkPolicy applies (the Ascend default is the host's).
POD_NETWORK = {"engine": {"hostNetwork": False}}
ON = {**POD_NETWORK, "networkPolicy": {"enabled": True}}
# Every pod the chart can make beside the engines, the proxy and the test pod, and the scraper.
OPTIONAL = {
    "benchmark": {"enabled": True},
    "test": {"kvCanary": {"cronJob": {"enabled": True}}},
    "metrics": {"podMonitor": {"enabled": True}},
}
PROXY_FROM = {"proxyFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "clients"}}}]}

CASES = {
    # The chart's defaults (Ascend A3, router.type proxy) with the NetworkPolicies on.
    "defaults": ((), ON),
    # The cpu profile, which the e2e runs (NixlConnector, one kv port a role).
    "cpu": ((CPU,), {"networkPolicy": {"enabled": True}}),
    "proxy-optional": ((), {**ON, **OPTIONAL}),
    "proxy-from": ((), {**ON, **OPTIONAL, "networkPolicy": {"enabled": True, **PROXY_FROM}}),
    # Kthena's router (its scenario serves both roles on one port, 7100).
    "kthena-optional": ((KTHENA,), {**POD_NETWORK, **OPTIONAL}),
    # Kthena's autoscaler reading decode's pod metrics; no canary can run (no pairs known).
    "kthena-autoscaling": ((AUTOSCALING,), POD_NETWORK),
}

HEAD = "| source | prefill:server | prefill:dp-rpc | prefill:kv-* | prefill:other | decode:server | decode:dp-rpc | decode:kv-* | decode:other"  # noqa: E501
PROXIED = f"""
{HEAD} | proxy:http |
| prefill                                 | yes | yes | yes | yes | yes | yes | yes | yes | yes |
| decode                                  | yes | yes | yes | yes | yes | yes | yes | yes | yes |
| proxy                                   | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| test                                    | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| pod in the release namespace            | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in namespace clients                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in another namespace                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Kthena router                           | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Kthena controller-manager               | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Prometheus                              | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Kthena router labels, release namespace | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Prometheus labels, another namespace    | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| prefill of another release              | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| proxy of another release                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| outside the cluster                     | no  | no  | no  | no  | no  | no  | no  | no  | yes |
"""
EXPECTED = {
    "defaults": PROXIED,
    "cpu": PROXIED,
    "proxy-optional": f"""
{HEAD} | proxy:http |
| prefill                                 | yes | yes | yes | yes | yes | yes | yes | yes | yes |
| decode                                  | yes | yes | yes | yes | yes | yes | yes | yes | yes |
| proxy                                   | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| test                                    | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| kv-canary                               | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| benchmark                               | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in the release namespace            | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in namespace clients                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in another namespace                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Kthena router                           | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Kthena controller-manager               | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Prometheus                              | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| Kthena router labels, release namespace | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| Prometheus labels, another namespace    | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| prefill of another release              | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| proxy of another release                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| outside the cluster                     | no  | no  | no  | no  | no  | no  | no  | no  | yes |
""",
    "proxy-from": f"""
{HEAD} | proxy:http |
| prefill                                 | yes | yes | yes | yes | yes | yes | yes | yes | no  |
| decode                                  | yes | yes | yes | yes | yes | yes | yes | yes | no  |
| proxy                                   | yes | no  | no  | no  | yes | no  | no  | no  | no  |
| test                                    | yes | no  | no  | no  | yes | no  | no  | no  | yes |
| kv-canary                               | yes | no  | no  | no  | yes | no  | no  | no  | no  |
| benchmark                               | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in the release namespace            | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| pod in namespace clients                | no  | no  | no  | no  | no  | no  | no  | no  | yes |
| pod in another namespace                | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| Kthena router                           | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| Kthena controller-manager               | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| Prometheus                              | yes | no  | no  | no  | yes | no  | no  | no  | no  |
| Kthena router labels, release namespace | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| Prometheus labels, another namespace    | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| prefill of another release              | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| proxy of another release                | no  | no  | no  | no  | no  | no  | no  | no  | no  |
| outside the cluster                     | no  | no  | no  | no  | no  | no  | no  | no  | no  |
""",
    "kthena-optional": f"""
{HEAD} |
| prefill                                 | yes | yes | yes | yes | yes | yes | yes | yes |
| decode                                  | yes | yes | yes | yes | yes | yes | yes | yes |
| test                                    | yes | no  | no  | no  | yes | no  | no  | no  |
| kv-canary                               | yes | no  | no  | no  | yes | no  | no  | no  |
| benchmark                               | no  | no  | no  | no  | no  | no  | no  | no  |
| pod in the release namespace            | no  | no  | no  | no  | no  | no  | no  | no  |
| pod in namespace clients                | no  | no  | no  | no  | no  | no  | no  | no  |
| pod in another namespace                | no  | no  | no  | no  | no  | no  | no  | no  |
| Kthena router                           | yes | no  | no  | no  | yes | no  | no  | no  |
| Kthena controller-manager               | no  | no  | no  | no  | no  | no  | no  | no  |
| Prometheus                              | yes | no  | no  | no  | yes | no  | no  | no  |
| Kthena router labels, release namespace | no  | no  | no  | no  | no  | no  | no  | no  |
| Prometheus labels, another namespace    | no  | no  | no  | no  | no  | no  | no  | no  |
| prefill of another release              | no  | no  | no  | no  | no  | no  | no  | no  |
| outside the cluster                     | no  | no  | no  | no  | no  | no  | no  | no  |
""",
    "kthena-autoscaling": f"""
{HEAD} |
| prefill                                 | yes | yes | yes | yes | yes | yes | yes | yes |
| decode                                  | yes | yes | yes | yes | yes | yes | yes | yes |
| test                                    | yes | no  | no  | no  | yes | no  | no  | no  |
| pod in the release namespace            | no  | no  | no  | no  | no  | no  | no  | no  |
| pod in namespace clients                | no  | no  | no  | no  | no  | no  | no  | no  |
| pod in another namespace                | no  | no  | no  | no  | no  | no  | no  | no  |
| Kthena router                           | yes | no  | no  | no  | yes | no  | no  | no  |
| Kthena controller-manager               | yes | no  | no  | no  | yes | no  | no  | no  |
| Prometheus                              | yes | no  | no  | no  | yes | no  | no  | no  |
| Kthena router labels, release namespace | no  | no  | no  | no  | no  | no  | no  | no  |
| Prometheus labels, another namespace    | no  | no  | no  | no  | no  | no  | no  | no  |
| prefill of another release              | no  | no  | no  | no  | no  | no  | no  | no  |
| outside the cluster                     | no  | no  | no  | no  | no  | no  | no  | no  |
""",
}

# Cells where the chart's policies differ from the threat model today: (case, source, column).
# None: the benchmark kept from the proxy under proxyFrom (fixed in 090f593) and a
# Prometheus-labelled pod of any namespace let into the serving ports by prometheusFrom's default
# (fixed by defaulting its namespace to monitoring), both found here.
KNOWN_GAPS: set[tuple[str, str, str]] = set()


def _table(render, case: str) -> policytable.Table:
    values_files, overrides = CASES[case]
    table = policytable.connectivity(render(values_files, overrides).objects)
    OUT.mkdir(parents=True, exist_ok=True)
    expected = policytable.parse(EXPECTED[case])
    differing = "".join(f"- {d}\n" for d in table.differences(expected))
    (OUT / f"{case}.md").write_text(
        f"# Connectivity, {case} (cyclonus v0.5.6; rows: sources, columns: pod:port)\n\n{table.markdown()}\n"
        f"Differences from the threat model (this table's, the expected):\n\n{differing or '(none)'}\n"
    )
    return table


def _gaps(case: str, table: policytable.Table) -> set[tuple[str, str, str]]:
    expected = policytable.parse(EXPECTED[case])
    return {
        (case, source, column)
        for source, cells in expected.rows.items()
        for column, verdict in cells.items()
        if table.rows.get(source, {}).get(column, verdict) != verdict
    }


@pytest.mark.parametrize("case", CASES)
def test_the_tables_equal_the_threat_model(render, case: str):
    table = _table(render, case)
    expected = policytable.parse(EXPECTED[case])
    assert (table.columns, list(table.rows)) == (expected.columns, list(expected.rows))
    known = {gap for gap in KNOWN_GAPS if gap[0] == case}
    found = _gaps(case, table)
    assert found - known == set(), "cells that differ from the threat model (this table's: out/network-isolation-table)"
    assert known - found == set(), "known gaps that no longer differ: remove them from KNOWN_GAPS (and the xfail)"


def test_only_prometheus_namespace_may_scrape_the_engines(render):
    """A pod that wears Prometheus' labels in another namespace reaches no engine port, in every
    case where the PodMonitor is on."""
    for case in ("proxy-optional", "proxy-from", "kthena-optional", "kthena-autoscaling"):
        row = _table(render, case).rows["Prometheus labels, another namespace"]
        assert {row[c] for c in ("prefill:server", "decode:server")} == {policytable.NO}, case


def test_without_networkpolicy_every_connection_is_allowed(render):
    """The control: the same sources and ports, no policy, and the engine allows every probe; so
    each `no` above is the policies' doing, and the engine answers both ways."""
    values_files, overrides = CASES["proxy-optional"]
    table = policytable.connectivity(render(values_files, {**overrides, "networkPolicy": {"enabled": False}}).objects)
    assert table.columns == policytable.parse(EXPECTED["proxy-optional"]).columns
    assert {verdict for cells in table.rows.values() for verdict in cells.values()} == {policytable.YES}


def test_removing_one_rule_flips_exactly_its_connections(render):
    """The engine reads each rule: without the engines' rule that admits the release's engines
    on every port, exactly the engine-to-engine probes turn to no (the serving ports' rule admits
    the router, the canary and Prometheus, not the engines)."""
    values_files, overrides = CASES["proxy-optional"]
    objects = render(values_files, overrides).objects
    policies = copy.deepcopy([o for o in objects if o["kind"] == "NetworkPolicy"])
    engines = next(p for p in policies if p["metadata"]["name"].endswith("-engines"))
    engines["spec"]["ingress"] = [r for r in engines["spec"]["ingress"] if "ports" in r]
    assert len(engines["spec"]["ingress"]) == 1
    before = policytable.connectivity(objects)
    after = policytable.connectivity(objects, policies)
    flipped = {
        (s, c) for s, cells in before.rows.items() for c, verdict in cells.items() if after.rows[s][c] != verdict
    }
    assert flipped == {
        (src, f"{dst}:{port}")
        for src in ("prefill", "decode")
        for dst in ("prefill", "decode")
        for port in ("server", "dp-rpc", "kv-*", "other")
    }


def test_host_network_engines_are_refused(render):
    """The Ascend default runs the engines on the host network, where NetworkPolicy polices
    nothing: a table of it would be a table of intentions, so it is refused, naming the fix."""
    objects = render((), {"networkPolicy": {"enabled": True}}).objects
    with pytest.raises(policytable.PolicyTableError, match=r"host network.*cpu profile"):
        policytable.connectivity(objects)


def test_the_program_refuses_what_it_cannot_read():
    """A field the engine's networking/v1 does not know would be dropped, changing the verdict:
    the program names it instead; an unknown source too."""
    binary = str(policytable.binary())
    policy = {"metadata": {"name": "p", "namespace": "n"}, "spec": {"podSelector": {}, "ingres": []}}
    for payload, said in (
        ({"policies": [policy]}, 'unknown field "ingres"'),
        ({"pods": [{"name": "a", "namespace": "n"}], "probes": [{"source": "x", "pod": "a", "port": 1}]}, "source"),
    ):
        proc = subprocess.run([binary], input=json.dumps(payload), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and said in proc.stderr, proc.stderr


def test_the_program_pins_the_cyclonus_the_components_name():
    """One version: cluster/components.yaml's policytable entry and its module's go.mod."""
    component = build.components()["policytable"]
    text = (build.CLUSTER / "policytable" / "go.mod").read_text()
    assert re.search(rf"^\s*github\.com/mattfenwick/cyclonus {re.escape(component.version)}$", text, re.M)


def test_a_named_port_resolves_on_the_destination_pod():
    """A rule naming a port (`server`) admits that container port's number on the pod that has it
    and nothing on a pod without it, as kubelet's named ports do."""
    policy = {
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": "server"}]}]},
    }
    pods = [{"name": "a", "namespace": "n", "ports": {"server": 7100}}, {"name": "b", "namespace": "n"}]
    probes = [{"source": "s", "pod": pod, "port": port} for pod, port in (("a", 7100), ("a", 7101), ("b", 7100))]
    payload = {"policies": [policy], "pods": pods, "sources": [{"name": "s", "namespace": "m"}], "probes": probes}
    proc = subprocess.run(
        [str(policytable.binary())], input=json.dumps(payload), capture_output=True, text=True, timeout=60, check=True
    )
    assert [v["allowed"] for v in json.loads(proc.stdout)["verdicts"]] == [True, False, False]


def test_a_program_built_from_other_sources_is_refused(tmp_path, monkeypatch):
    """make cluster-tools reuses a built folder, so an edited main.go would be answered by the old
    program: the program's embedded digests tell them apart, whatever the file times say."""
    for name in ("main.go", "go.mod", "go.sum"):
        (tmp_path / name).write_bytes((policytable.PROGRAM_DIR / name).read_bytes())
    (tmp_path / "main.go").write_text((tmp_path / "main.go").read_text() + "// edited\n")
    monkeypatch.setattr(policytable, "PROGRAM_DIR", tmp_path)
    policytable.binary.cache_clear()
    try:
        with pytest.raises(policytable.PolicyTableError, match="built from other sources"):
            policytable.binary()
    finally:
        policytable.binary.cache_clear()
