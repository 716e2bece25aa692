"""The tool outside the checkout: the package built and installed (`pip install`) into a fresh
venv, run from a folder that is not the repository. Its dependencies come from the project venv
(PYTHONPATH: a .pth there is not read, so the checkout's own mooncake_pd stays out of sight)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from mooncake_pd import header, paths

MODEL = Path(__file__).parent / "fixtures" / "models" / "Qwen3-8B"
# What pyproject.toml builds the package from; copied so that the build leaves nothing in the checkout.
SOURCES = ("pyproject.toml", "LICENSE", "README.md", "scripts", "chart")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's bin folder, with mooncake-pd installed from a copy of the sources."""
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        source = paths.REPO / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif source.exists():
            shutil.copy2(source, src / name)
    venv = root / "venv"
    # Without its own pip (ensurepip takes seconds): the project venv's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    into = ["--python", str(venv / "bin" / "python")]
    # Verbose, so that the build backend's warnings are kept (test_the_build_warns_of_nothing).
    pip = subprocess.run(
        [sys.executable, "-m", "pip", *into, "install", "--verbose", "--no-deps", str(src)],
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stderr
    (root / "pip.log").write_text(pip.stdout + pip.stderr)
    return venv / "bin"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(paths.REPO)
    return folder


def tool(bin_dir: Path, cwd: Path, *args: str | Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("HELM", "PYTHONPATH")}
    environ["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    return subprocess.run(
        [str(bin_dir / "mooncake-pd"), *map(str, args)], capture_output=True, text=True, cwd=cwd, env={**environ, **env}
    )


def refusal(proc: subprocess.CompletedProcess) -> str:
    """One line on stderr, exit 2, no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mooncake-pd: "), proc.stderr
    return lines[0]


def test_the_installed_package_is_the_one_that_runs(installed: Path, elsewhere: Path):
    proc = subprocess.run(
        [str(installed / "python"), "-c", "import mooncake_pd.paths as p; print(p.CHART)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]},
    )
    assert proc.returncode == 0, proc.stderr
    chart = Path(proc.stdout.strip())
    assert chart.is_relative_to(installed.parent), "the chart shipped with the package, not the checkout's"
    assert (chart / "Chart.yaml").is_file() and (chart / ".helmignore").is_file()
    assert (chart / "files" / "preflight.py").read_text() == (paths.CHART / "files" / "preflight.py").read_text()


def test_generate_and_render_outside_the_checkout(installed: Path, elsewhere: Path):
    helped = tool(installed, elsewhere, "generate", "--help")
    assert helped.returncode == 0 and "--model-dir" in helped.stdout, helped.stderr
    generated = tool(installed, elsewhere, "generate", "--model-dir", MODEL, "--output", "values.yaml")
    assert generated.returncode == 0, generated.stderr
    text = (elsewhere / "values.yaml").read_text()
    # Issue #40 item 9: the header named `python -m mooncake_pd` and `$schema=../chart/...`, which
    # point nowhere here; the schema is the chart version's release's.
    version = yaml.safe_load((paths.CHART / "Chart.yaml").read_text())["version"]
    assert text.startswith(
        "# yaml-language-server: $schema=https://raw.githubusercontent.com/mooncake-pd/mooncake-pd/"
        f"v{version}/chart/values.schema.json\n"
    )
    # The recorded command, read as update reads it: a long --model-dir (a deep checkout) wraps it
    # onto continuation lines.
    assert (header.command(text) or [])[:3] == ["mooncake-pd", "generate", "--model-dir"], text[:400]
    rendered = tool(
        installed, elsewhere, "render", "--helm", paths.helm_binary(), "-f", "values.yaml", "--out", "o.yaml"
    )
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.startswith("Wrote o.yaml") and "kind: ModelServing" in (elsewhere / "o.yaml").read_text()


def test_render_without_helm_refuses_in_one_line(installed: Path, elsewhere: Path):
    # Without HELM the installed tool uses the helm on PATH; here there is none.
    line = refusal(tool(installed, elsewhere, "render", PATH=str(installed)))
    assert "no helm on PATH" in line and "no pinned helm" in line and "--helm PATH or set HELM" in line
    line = refusal(tool(installed, elsewhere, "render", HELM="no-such-helm"))
    assert "no helm at no-such-helm on PATH" in line


def test_a_folder_without_a_chart_is_refused_in_one_line(installed: Path, elsewhere: Path):
    for args in (["render", "--helm", paths.helm_binary()], ["generate", "--model-dir", MODEL]):
        line = refusal(tool(installed, elsewhere, *args, "--chart", elsewhere))
        assert f"no chart at {elsewhere}" in line and "pass --chart" in line


def test_the_build_warns_of_nothing(installed: Path):
    """Issue #40 item 9: `make render` printed about 400 lines of setuptools warnings, one
    "Package would be ignored" banner per chart folder (pyproject.toml include-package-data)."""
    log = (installed.parent.parent / "pip.log").read_text()
    assert "Successfully installed mooncake-pd-tools" in log, "the verbose log of the install"
    assert "Package would be ignored" not in log and "is absent from the `packages` configuration" not in log


def test_every_module_of_the_checkout_is_installed(installed: Path):
    """pyproject.toml lists the packages (packages.find is ruled out): a subpackage left off the
    list would be missing from the installed tool."""
    purelib = subprocess.run(
        [str(installed / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    package = Path(purelib) / "mooncake_pd"
    shipped = {p.relative_to(package) for p in package.rglob("*.py") if p.parts[len(package.parts)] != "chart"}
    source = paths.REPO / "scripts" / "mooncake_pd"
    assert shipped == {p.relative_to(source) for p in source.rglob("*.py")}


def test_autoscale_simulate_outside_the_checkout(installed: Path, elsewhere: Path):
    fixtures = Path(__file__).parent / "fixtures" / "autoscale"
    proc = tool(
        installed,
        elsewhere,
        "autoscale",
        "simulate",
        fixtures / "pd-policy.yaml",
        "--series",
        fixtures / "pd-series.csv",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["time_s", "decode", "prefill", "note"]


def test_developer_commands_are_not_offered_outside_a_checkout(installed: Path, elsewhere: Path):
    """golden, schema, docs and chartcheck write or check the repository's files: an installed
    tool does not list them, and named anyway they say where they run (golden would write into
    the venv, docs --check crashed)."""
    helped = tool(installed, elsewhere, "--help")
    assert helped.returncode == 0
    for name in ("golden", "schema", "docs", "chartcheck"):
        assert name not in helped.stdout
        for args in ([name], [name, "--check"]):
            line = refusal(tool(installed, elsewhere, *args))
            assert f"{name} is a developer command" in line and "make " in line
    assert "render" in helped.stdout and "verify" in helped.stdout
