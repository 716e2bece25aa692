"""Errors meant for people: every exception class of the package derives from
errors.MooncakePdError, whose class decides the exit code, and cli.main reports it once."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
from types import SimpleNamespace

import pytest

import mooncake_pd
from mooncake_pd import cli, commands
from mooncake_pd.errors import BAD_INPUT, FAILED, MooncakePdError

# Every exception class of the package and the exit code the CLI gives it.
EXIT_CODES = {
    "mooncake_pd.advisories.AdvisoryError": BAD_INPUT,
    "mooncake_pd.architectures.ArchitectureError": BAD_INPUT,
    "mooncake_pd.autoscale.policy.AutoscaleError": BAD_INPUT,
    "mooncake_pd.bench.BenchError": BAD_INPUT,
    "mooncake_pd.bench.JobFailed": FAILED,
    "mooncake_pd.cel.CelError": FAILED,
    "mooncake_pd.cel.CelUnsupported": FAILED,
    "mooncake_pd.chartfiles.ChartFileError": BAD_INPUT,
    "mooncake_pd.clusterfit.QuantityError": BAD_INPUT,
    "mooncake_pd.clusterreport.Forbidden": FAILED,
    "mooncake_pd.clusterreport.PreflightError": BAD_INPUT,
    "mooncake_pd.docs.DocsError": BAD_INPUT,
    "mooncake_pd.enginecheck.EngineCheckError": BAD_INPUT,
    "mooncake_pd.enginedata.EngineDataError": FAILED,
    "mooncake_pd.errors.MooncakePdError": BAD_INPUT,
    "mooncake_pd.topology.GenerateError": BAD_INPUT,
    "mooncake_pd.helm.HelmError": BAD_INPUT,
    "mooncake_pd.kubeopenapi.OpenApiError": BAD_INPUT,
    "mooncake_pd.model.ModelError": BAD_INPUT,
    "mooncake_pd.paths.Missing": BAD_INPUT,
    "mooncake_pd.profiles.ProfileError": BAD_INPUT,
    "mooncake_pd.scriptrun.ScriptFailed": FAILED,
    "mooncake_pd.validate.CrdsMissing": BAD_INPUT,
    "mooncake_pd.values_file.ValuesFileError": BAD_INPUT,
    "mooncake_pd.verify.VerifyError": BAD_INPUT,
}


def exception_classes() -> dict[str, type[BaseException]]:
    """The exception classes defined in the package's modules (`__main__` runs the CLI when
    imported, and defines none)."""
    found = {}
    for info in pkgutil.walk_packages(mooncake_pd.__path__, "mooncake_pd."):
        if info.name == "mooncake_pd.__main__":
            continue
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_exception_class_of_the_package_is_an_error_for_people():
    found = exception_classes()
    assert sorted(found) == sorted(EXIT_CODES), "a new exception class: derive it from MooncakePdError, list it"
    for name, cls in found.items():
        assert issubclass(cls, MooncakePdError), name
        assert cls.exit_code == EXIT_CODES[name], name


def _instance(cls: type[MooncakePdError]) -> MooncakePdError:
    if cls.__name__ == "ScriptFailed":
        return cls(78, "the message\n")
    return cls("the message")


@pytest.mark.parametrize("name", sorted(EXIT_CODES))
@pytest.mark.parametrize("label", [None, "mooncake-pd verify"])
def test_cli_main_prints_the_error_once_and_exits_with_its_class_code(
    name: str, label: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    cls = exception_classes()[name]
    assert issubclass(cls, MooncakePdError)
    error = _instance(cls)

    def run(args: argparse.Namespace) -> int:
        raise error

    def register(sub: argparse._SubParsersAction) -> None:
        parser = sub.add_parser("render")
        parser.set_defaults(func=run, **({"error_label": label} if label else {}))

    monkeypatch.setattr(commands, "load", lambda _: SimpleNamespace(register=register))
    assert cli.main(["render"]) == EXIT_CODES[name]
    captured = capsys.readouterr()
    message = "script exited 78: the message" if cls.__name__ == "ScriptFailed" else "the message"
    prefix = "helm failed:\n" if cls.__name__ == "HelmError" else ""
    assert captured.err == f"{label or 'mooncake-pd'}: {prefix}{message}\n"
    assert captured.out == ""


def test_other_exceptions_are_not_caught(monkeypatch: pytest.MonkeyPatch):
    """A bug is a traceback, not a one-line message."""

    def register(sub: argparse._SubParsersAction) -> None:
        sub.add_parser("render").set_defaults(func=lambda args: 1 // 0)

    monkeypatch.setattr(commands, "load", lambda _: SimpleNamespace(register=register))
    with pytest.raises(ZeroDivisionError):
        cli.main(["render"])
