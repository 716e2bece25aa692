"""Rendered output of the defaults and of every values/ file equals its checked-in golden file
under both helm versions (`make golden` rewrites them; read the diff before committing)."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import Renderer
from mooncake_pd import golden, helm, paths

CASES = golden.cases()


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_render_equals_golden(render: Renderer, name: str):
    path = golden.golden_path(name)
    assert path.exists(), f"{path} missing: run `make golden`"
    assert render(CASES[name]).text == path.read_text(), f"{name} differs from {path}: run `make golden`"


def test_no_stale_golden_files():
    assert {p.stem for p in paths.GOLDEN_DIR.glob("*.yaml")} == set(CASES)


def test_rendering_is_deterministic(render: Renderer):
    """Two separate helm runs give identical bytes (no cache involved)."""
    first = helm.template(render.binary)
    second = helm.template(render.binary)
    assert first == second


NONDETERMINISTIC = re.compile(
    r"\b(lookup|now|date|dateInZone|unixEpoch|randAlpha|randAlphaNum|randNumeric|randAscii|randInt|randBytes"
    r"|uuidv4|shuffle|genCA|genPrivateKey|genSelfSignedCert|genSignedCert|htpasswd|getHostByName)\b"
)


def test_templates_use_no_cluster_random_or_time_functions():
    actions = []
    for path in sorted((paths.CHART / "templates").rglob("*")):
        if path.is_file():
            actions += [(path.name, a) for a in re.findall(r"{{(.*?)}}", path.read_text(), re.S)]
    assert actions, "no template actions found"
    offending = [(name, a.strip()) for name, a in actions if NONDETERMINISTIC.search(re.sub(r'"[^"]*"', "", a))]
    assert offending == []


def test_golden_command_regenerates_identically(tmp_path):
    """`make golden` reproduces the checked-in files byte for byte."""
    written = golden.write_all(paths.helm_binary(), tmp_path)
    for path in written:
        assert path.read_text() == golden.golden_path(path.stem).read_text()


def test_helm_lint_strict(render: Renderer):
    proc = subprocess.run([str(render.binary), "lint", "--strict", str(paths.CHART)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
