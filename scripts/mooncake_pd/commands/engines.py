"""`mooncake-pd engines generate`: read an engine version's data from its own packages.

For each engine version of chart/files/profiles.yaml (its `vllm` and `vllmAscend` fields name
the releases), it downloads the vllm and vllm-ascend wheels from PyPI (cached in
.tools/engines/wheels), unpacks vllm into .tools/engines/vllm-<version>, runs engine_probe.py
there on vLLM's own parsers (its dependencies, torch among them, come from that release's own
e2e venv where the e2e runs its CPU build, .tools/e2e-v<vllm>, else from vLLM 0.13.0's), reads
vLLM-Ascend's connector registrations and --additional-config keys and vLLM's metric families
from the wheels' sources, and writes chart/files/engines/<version>/. --check writes nothing and
fails where the checked-in data differ from what the packages say.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mooncake_pd import enginedata, paths, profiles
from mooncake_pd.commands import SUMMARIES
from mooncake_pd.enginedata import EngineDataError

ENGINES = paths.TOOLS_DIR / "engines"
WHEELS = ENGINES / "wheels"
# The interpreter whose site-packages give vLLM its dependencies (scripts/install-e2e.sh), where
# the release has no e2e venv of its own (probe_python).
PROBE_PYTHON = paths.e2e_venv(paths.E2E_FIRST_CPU) / "bin" / "python"
PROBE = paths.PACKAGE / "engine_probe.py"
FILES = (
    "serve-flags.json",
    "bench-serve-flags.json",
    "kv-transfer-config.json",
    "metrics.txt",
    "config-keys.json",
    "registered-names.json",
    "serve-checks.json",
)


def wheel(project: str, version: str) -> Path:
    """The cached wheel of project==version, downloaded (no dependencies) when missing."""
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"
    found = sorted(WHEELS.glob(pattern))
    if not found:
        WHEELS.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
        command += ["--only-binary=:all:", "--python-version", "3.11", "-d", str(WHEELS), f"{project}=={version}"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        found = sorted(WHEELS.glob(pattern))
        if done.returncode != 0 or not found:
            raise EngineDataError(f"pip could not download {project}=={version}: {done.stderr.strip()[-400:]}")
    return found[-1]


def unpacked(path: Path, version: str) -> Path:
    """The vllm wheel unpacked into .tools/engines/vllm-<version> (a pure-Python import path:
    the parsers and configs engine_probe.py reads load no compiled kernel)."""
    target = ENGINES / f"vllm-{version}"
    stamp = target / ".unpacked"
    if stamp.is_file() and stamp.read_text() == path.name:
        return target
    with zipfile.ZipFile(path) as archive:
        archive.extractall(target)
    stamp.write_text(path.name)
    return target


def probe_python(version: str) -> Path:
    """The Python that imports vLLM `version`'s parsers: the release's own e2e venv, where the e2e
    runs its CPU build (paths.later_cpu_releases) and it is installed, else vLLM 0.13.0's with
    overlay() (requirements-engine-probe-<version>.txt pins what that release's parsers need
    beyond it; its data came out byte-identical either way at 0.32.0)."""
    own = paths.e2e_venv(f"v{version}") / "bin" / "python"
    if f"v{version}" in paths.later_cpu_releases() and own.is_file():
        return own
    return PROBE_PYTHON


def overlay(version: str) -> list[Path]:
    """Where a vLLM newer than the e2e venv's needs newer dependencies to import its parsers
    (requirements-engine-probe-<version>.txt, pinned): them, installed --no-deps into
    .tools/engines/overlay-<version>. Empty where the e2e venv's suffice."""
    pins = paths.REPO / f"requirements-engine-probe-{version}.txt"
    if not pins.is_file():
        return []
    target = ENGINES / f"overlay-{version}"
    stamp = target / ".installed"
    if stamp.is_file() and stamp.read_text() == pins.read_text():
        return [target]
    command = [str(PROBE_PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    command += ["--upgrade", "--target", str(target), "-r", str(pins)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise EngineDataError(f"pip could not install {pins.name}: {done.stderr.strip()[-400:]}")
    stamp.write_text(pins.read_text())
    return [target]


def probe(target: Path, extra: list[Path], python: Path = PROBE_PYTHON) -> dict:
    """What engine_probe.py prints in `python` with this vLLM (then `extra`) first on sys.path."""
    if not python.is_file():
        raise EngineDataError(f"no {python}: run `make e2e-venv` first (it gives vLLM its dependencies)")
    path = os.pathsep.join(str(p) for p in [target, *extra])
    env = {**os.environ, "PYTHONPATH": path, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run([str(python), str(PROBE)], capture_output=True, text=True, env=env, check=False, timeout=600)
    if done.returncode != 0:
        raise EngineDataError(f"engine_probe.py failed on {target.name}: {done.stderr.strip()[-1500:]}")
    result: dict = json.loads(done.stdout)
    return result


def source_md(version: str, row: dict, wheels: list[Path], digests: dict[str, str]) -> str:
    lines = [
        f"# Engine version {version}: data read from its own packages",
        "",
        "Generated by `mooncake-pd engines generate` (`make engines`); do not edit by hand.",
        "`make engines-check` (and tests/test_engine_data.py) fails where this folder and the packages differ.",
        "",
        "| wheel (PyPI) | sha256 |",
        "| --- | --- |",
    ]
    lines += [f"| {w.name} | {digests[w.name]} |" for w in wheels]
    lines += [
        "",
        "- `serve-flags.json`: every option of `vllm serve`, from vLLM's own parser",
        "  (`vllm.entrypoints.cli.serve.ServeSubcommand().subparser_init`), with the numeric `bounds`",
        "  its vLLM config field declares (pydantic `Field(gt=..., le=...)`, annotated_types) where it has any.",
        "- `bench-serve-flags.json`: every option of `vllm bench serve` and its default",
        "  (`vllm.benchmarks.serve.add_cli_args`).",
        "- `kv-transfer-config.json`: `vllm.config.KVTransferConfig`'s fields and defaults, and `extra`",
        "  (forbid: vLLM refuses any other key of --kv-transfer-config at start).",
        f"- `metrics.txt`: the metric families the chart reads, as `{enginedata.METRICS_SOURCE}` registers them.",
        "- `config-keys.json`: per `vllm serve` option whose config field is a config class (--compilation-config,",
        "  --speculative-config, ...), that class's fields, nested config classes' one level down, and `extra`",
        "  (forbid: vLLM refuses any other key at start; ignore: it drops it without a word); read from the",
        "  classes themselves (pydantic `__pydantic_fields__`, `__pydantic_config__`).",
        "- `registered-names.json`: the reasoning parsers (`ReasoningParserManager.list_registered()`), tool-call",
        "  parsers (`ToolParserManager.list_registered()`) and attention backends (the enum --attention-backend's",
        "  config field takes) this vLLM holds; its API server refuses other parser names at start.",
        f"- `serve-checks.json`: the checks `{enginedata.SERVE_CHECKS_FUNCTION}` makes on the parsed flags before",
        "  anything loads (which flag requires or excludes which), read from its source; `unread` names the",
        "  statements it runs that these data do not hold.",
    ]
    if row.get("vllmAscend"):
        lines += [
            "- `vllm-ascend.json`: the connectors vLLM-Ascend registers (`KVConnectorFactory.register_connector`)",
            "  and the top-level --additional-config keys its code reads.",
        ]
    lines += ["", "vLLM and vLLM-Ascend are Apache-2.0; only facts about them are kept here."]
    return "\n".join(lines) + "\n"


def generate(version: str, row: dict) -> dict[str, str]:
    """The files of chart/files/engines/<version>/ (name -> text), read from the packages."""
    vllm_wheel = wheel("vllm", row["vllm"])
    python = probe_python(row["vllm"])
    extra = overlay(row["vllm"]) if python == PROBE_PYTHON else []
    found = probe(unpacked(vllm_wheel, row["vllm"]), extra, python)
    if found["vllm"] != row["vllm"]:
        raise EngineDataError(f"the probe imported vLLM {found['vllm']}, not {row['vllm']}")
    vllm_sources = enginedata.read_wheel(vllm_wheel, "vllm/")
    files = {
        "serve-flags.json": enginedata.options_json(row["vllm"], "vllm serve", found["serve"]),
        "bench-serve-flags.json": enginedata.options_json(row["vllm"], "vllm bench serve", found["benchServe"]),
        "kv-transfer-config.json": enginedata.kv_transfer_json(row["vllm"], found["kvTransferConfig"]),
        "metrics.txt": enginedata.metrics_text(
            enginedata.registered_metrics(vllm_sources), row["vllm"], vllm_wheel.name
        ),
        "config-keys.json": enginedata.config_keys_json(row["vllm"], found["configKeys"]),
        "registered-names.json": enginedata.registered_names_json(row["vllm"], found["registered"]),
        "serve-checks.json": enginedata.serve_checks_json(
            row["vllm"], enginedata.serve_checks(vllm_sources), found["serve"], found["serveDefaults"]
        ),
    }
    wheels = [vllm_wheel]
    digests = {vllm_wheel.name: vllm_sources.sha256}
    if row.get("vllmAscend"):
        ascend_wheel = wheel("vllm-ascend", row["vllmAscend"])
        ascend = enginedata.read_wheel(ascend_wheel, "vllm_ascend/")
        files["vllm-ascend.json"] = enginedata.ascend_json(row["vllmAscend"], ascend)
        wheels.append(ascend_wheel)
        digests[ascend_wheel.name] = ascend.sha256
    files["SOURCE.md"] = source_md(version, row, wheels, digests)
    return files


def differences(folder: Path, files: dict[str, str]) -> list[str]:
    """The files of `folder` that differ from `files`, or are missing, or are extra."""
    problems = []
    for name, text in files.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{path.relative_to(paths.REPO)}: missing")
        elif path.read_text() != text:
            problems.append(f"{path.relative_to(paths.REPO)}: differs from what the packages say")
    extra = sorted(p.name for p in folder.glob("*") if p.name not in files) if folder.is_dir() else []
    problems += [f"{(folder / name).relative_to(paths.REPO)}: not generated (remove it)" for name in extra]
    return problems


def write(folder: Path, files: dict[str, str]) -> None:
    """Each file written whole (a temporary file renamed over it)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, prefix=f".{name}.") as handle:
            handle.write(text)
        Path(handle.name).replace(folder / name)


def run(args: argparse.Namespace) -> int:
    engines = profiles.load(profiles.profiles_file(paths.chart_dir(args.chart)))["engines"]
    versions = args.versions or sorted(engines)
    unknown = [v for v in versions if v not in engines]
    if unknown:
        raise EngineDataError(f"{', '.join(unknown)}: not in chart/files/profiles.yaml engines ({', '.join(engines)})")
    problems = []
    for version in versions:
        files = generate(version, engines[version])
        folder = paths.ENGINE_DATA / version
        if args.check:
            problems += differences(folder, files)
        else:
            write(folder, files)
            print(f"wrote {folder.relative_to(paths.REPO)}/ ({', '.join(sorted(files))})")
    if problems:
        raise EngineDataError(
            "the engine data differ from the packages (run `make engines`):\n  " + "\n  ".join(problems)
        )
    if args.check:
        print(f"engine data of {', '.join(versions)} match their packages")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    engines = sub.add_parser(
        "engines",
        help=SUMMARIES["engines"],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = engines.add_subparsers(dest="action", required=True)
    gen = actions.add_parser("generate", help="write (or --check) chart/files/engines/<version>/")
    gen.add_argument("versions", nargs="*", help="engine versions of profiles.yaml (default: all)")
    gen.add_argument("--check", action="store_true", help="write nothing; fail where the data differ")
    gen.set_defaults(func=run)
