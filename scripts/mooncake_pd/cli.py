"""mooncake-pd: values from a model's config.json, render and validate the chart, verify a live
release, docs and golden files. Each command lives in mooncake_pd.commands.<name>.

Run `python -m mooncake_pd --help` (or `mooncake-pd --help` in the venv)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mooncake_pd import commands, paths
from mooncake_pd.errors import BAD_INPUT, MooncakePdError

PROG = "mooncake-pd"


def add_common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--helm and --chart, accepted before the command and after it. After it they default to
    SUPPRESS, so that a command's parser does not overwrite what was given before it."""
    parser.add_argument(
        "--helm",
        type=Path,
        default=paths.default_helm() if top else argparse.SUPPRESS,
        help="helm binary, a path or a name on PATH (default: $HELM, else the pinned helm 4 in a "
        "checkout's .tools/helm, which `make tools` installs)",
    )
    parser.add_argument(
        "--chart",
        type=Path,
        default=None if top else argparse.SUPPRESS,
        help="the chart folder (default: the checkout's chart/, else the copy installed with the package)",
    )


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (argparse names the option: `argument --prefill-tp:
    0 must be at least 1`). A size of 0 or below would divide by zero or write values the chart's
    schema refuses, so it is refused where it is typed."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; give a whole number of at least 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above 0 (a device memory or a time)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give one above 0") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return value


def add_release_options(
    parser: argparse.ArgumentParser, *, what: str, required: bool = False, default: str | None = None
) -> None:
    """--release NAME and -n/--namespace, spelled the same by every command that names a release
    (render, verify, bench) and as the chart's NOTES and the docs write them. `what`: what the
    release is to the command, for its help."""
    shown = f" (default: {default})" if default else ""
    parser.add_argument(
        "--release", required=required, default=default, metavar="NAME", help=f"helm release name: {what}{shown}"
    )
    parser.add_argument(
        "--namespace",
        "-n",
        default=paths.NAMESPACE,
        metavar="NAMESPACE",
        help=f"namespace of the release (default: {paths.NAMESPACE})",
    )


def command_in(argv: list[str]) -> str | None:
    """The command `argv` runs: its first word that is not an option or a top-level option's value."""
    words = iter(argv)
    for word in words:
        if word in ("--helm", "--chart"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole CLI. With `argv`, only the command it runs is loaded with its options; the others
    are listed by name (what `mooncake-pd --help` shows) and never parse anything."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Tooling for the mooncake-pd chart. Errors exit 2 (bad input) or 1 (invalid output).",
    )
    add_common_options(parser, top=True)
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = command_in(argv) if argv is not None else None
    for name, summary in commands.SUMMARIES.items():
        if name in commands.DEVELOPER and not paths.IN_CHECKOUT:
            continue  # not offered; main() says where it runs
        if argv is None or name == chosen:
            commands.load(name).register(sub)
        else:
            sub.add_parser(name, help=summary)
    if not paths.IN_CHECKOUT:
        sub.metavar = "{" + ",".join(n for n in commands.SUMMARIES if n not in commands.DEVELOPER) + "}"
    for command_parser in sub.choices.values():
        add_common_options(command_parser, top=False)
    return parser


def version_text() -> str:
    """The tool's version and the chart's it renders: `mooncake-pd --version`."""
    from importlib import metadata

    try:
        tool = metadata.version("mooncake-pd-tools")
    except metadata.PackageNotFoundError:
        tool = "not installed"
    chart = "unknown"
    for line in (paths.CHART / "Chart.yaml").read_text().splitlines():
        if line.startswith("version:"):
            chart = line.split(":", 1)[1].strip()
    return f"{PROG} {tool} (chart mooncake-pd {chart} at {paths.CHART})"


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names. An error meant for people (errors.MooncakePdError) is printed
    as `<label>: <prefix><message>` on stderr, where the label is `mooncake-pd` or the one the
    command sets (`error_label`, e.g. "mooncake-pd verify"), and its class decides the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = command_in(argv)
    if chosen in commands.DEVELOPER and not paths.IN_CHECKOUT:
        target = "lint" if chosen == "chartcheck" else chosen
        print(
            f"{PROG}: {chosen} is a developer command: it writes or checks the repository's own files; "
            f"run `make {target}` in a checkout of the mooncake-pd repository",
            file=sys.stderr,
        )
        return BAD_INPUT
    args = build_parser(argv).parse_args(argv)
    args.argv = argv
    try:
        status: int = args.func(args)
        sys.stdout.flush()
        return status
    except MooncakePdError as e:
        print(f"{getattr(args, 'error_label', PROG)}: {e.prefix}{e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # The reader went away (`mooncake-pd render | head`): stop quietly, as a shell tool does;
        # stdout is pointed at /dev/null so that the interpreter's final flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
