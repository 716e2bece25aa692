"""The code is laid out so a reader can tell what a thing is (issue 53): the CLI package
(scripts/mooncake_pd) holds only what `mooncake-pd` runs, the measuring harness lives in its own
package (harness/), no two modules share a name, no module is over LIMIT lines without a reason
written at its top, and no test module is named after the issue that asked for it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from mooncake_pd import commands, paths

REPO = paths.REPO
CLI = REPO / "scripts" / "mooncake_pd"
HARNESS = REPO / "harness"
SUPPORT = REPO / "tests" / "support"
# The standard says "under ~400 lines"; the tilde is this margin.
LIMIT = 420
# A longer module says why in its docstring, on a line of its own that begins so.
REASON = re.compile(r"^Over 400 lines: \S", re.M)
# Named after the issue or the occasion that asked for them, not what they prove (issue 53).
ISSUE_NAMED = re.compile(r"^test_(issue|item|day|round)\d|^test_(first_try|ecosystem)\b")


def modules(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def dotted(path: Path) -> str:
    """mooncake_pd.commands.render for scripts/mooncake_pd/commands/render.py (a package: its __init__)."""
    base = CLI.parent if path.is_relative_to(CLI) else REPO
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules `path` imports (at the top or inside functions; `from pkg import m`
    counts m where it is a module), the command modules commands.load() imports by name, and a
    sibling module run by path (a string "<module>.py" that is not a docstring, as
    commands/engines.py runs engine_probe.py)."""
    tree = ast.parse(path.read_text())
    name = dotted(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            match = re.fullmatch(r"(\w+)\.py", node.value)
            if match:
                found |= {m for m in known if m.rsplit(".", 1)[-1] == match[1]}
    if name == "mooncake_pd.commands":
        found |= {f"mooncake_pd.commands.{command}" for command in commands.SUMMARIES}
    return found & known


def test_the_cli_package_holds_only_what_the_cli_runs():
    files = {dotted(p): p for p in modules(CLI)}
    reached: set[str] = set()
    todo = ["mooncake_pd", "mooncake_pd.__main__", "mooncake_pd.cli"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += imported(files[module], set(files))
    unreached = sorted(set(files) - reached)
    assert not unreached, f"never run by `mooncake-pd` (move them to harness/ or tests/support/): {unreached}"


def test_the_cli_package_does_not_import_the_harness():
    for path in modules(CLI):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] in ("harness", "support")], path


def test_no_module_is_over_the_limit_without_a_reason_at_its_top():
    # chart/files/ is left out: each is one program a pod runs from the scripts ConfigMap, and its
    # text is in the golden files.
    long = {}
    for path in modules(CLI, HARNESS, SUPPORT):
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > LIMIT and not REASON.search(doc):
            long[str(path.relative_to(REPO))] = lines
    assert not long, f"over {LIMIT} lines with no 'Over 400 lines: <why>' line in the docstring: {long}"


def test_no_two_modules_share_a_name():
    """Within the CLI package, the harness and the test support (and against the standard
    library). commands/<name>.py is the CLI command of that name (commands.load imports it by
    the command's name); it may share its name with the module whose work it runs."""
    seen: dict[str, list[str]] = {}
    for path in modules(CLI, HARNESS, SUPPORT):
        if path.stem in ("__init__", "__main__"):
            continue
        if path.parent == CLI / "commands" and path.stem in commands.SUMMARIES:
            continue
        seen.setdefault(path.stem, []).append(str(path.relative_to(REPO)))
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert not twice, twice
    shadowing = sorted(set(seen) & set(sys.stdlib_module_names))
    assert not shadowing, f"named as a standard library module: {shadowing}"


def test_no_test_module_is_named_after_an_issue():
    named = sorted(p.name for p in (REPO / "tests").glob("test_*.py") if ISSUE_NAMED.search(p.stem))
    assert not named, f"name these after the behaviour they prove: {named}"
