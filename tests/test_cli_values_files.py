"""Values files the CLI reads (issue #40 items 7 and 9): a key given twice, which helm resolves by
keeping the last one silently and `update` ended in ruamel's DuplicateKeyError traceback, and a
tab in the indentation, which helm refuses with a bare "found character that cannot start any
token". `render` refuses both before it runs helm, `update` before it reads the file; each names
the file and line (and column for a tab), the problem and the fix, and leaves the file as it was.
(`generate` reads no values file: it writes one.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from mooncake_pd import paths, values_file
from mooncake_pd.cli import main
from mooncake_pd.commands import render

QWEN3 = Path(__file__).parent / "fixtures" / "models" / "Qwen3-8B"
TWO_ENGINES = "engine:\n  version: v0.13.0\nmodel:\n  maxModelLen: 8192\nengine:\n  args: {}\n"


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys: pytest.CaptureFixture[str], *args: str | Path) -> list[str]:
    """The lines of a refusal: exit 2, no traceback, `mooncake-pd: ` first."""
    code, out, err = run(capsys, *args)
    assert code == 2, out + err
    assert "Traceback" not in err and err.startswith("mooncake-pd: ")
    return err.removeprefix("mooncake-pd: ").strip().splitlines()


def untouched(folder: Path, path: Path, text: str) -> None:
    assert path.read_text() == text
    assert sorted(p.name for p in folder.iterdir()) == [path.name], "no .bak, no temporary file, no output"


@pytest.mark.parametrize("command", ["render", "update"])
def test_a_second_engine_key_is_refused_naming_file_and_line(tmp_path: Path, capsys, command: str):
    path = tmp_path / "values.yaml"
    path.write_text(TWO_ENGINES)
    if command == "render":
        lines = refused(capsys, "render", "-f", path, "--out", tmp_path / "out.yaml")
    else:
        lines = refused(capsys, "update", path, "--model-dir", QWEN3)
    assert lines == [
        f"{path}:5: duplicate key engine; remove one (line 1 gives it too, and helm would keep only the last, silently)"
    ]
    untouched(tmp_path, path, TWO_ENGINES)


def test_render_names_every_duplicate_of_every_file_before_helm_runs(tmp_path: Path, capsys):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("prefill:\n  args:\n    max-num-seqs: 8\n    max-num-seqs: 16\n")
    second.write_text("proxy:\n  env:\n    - name: A\n      name: B\nproxy:\n  replicas: 2\n")
    # No helm at all: the refusal comes first.
    lines = refused(capsys, "--helm", tmp_path / "no-helm", "render", "-f", first, "-f", second)
    assert [line.split(";")[0] for line in lines] == [
        f"{first}:4: duplicate key prefill.args.max-num-seqs",
        f"{second}:4: duplicate key proxy.env[0].name",
        f"{second}:5: duplicate key proxy",
    ]


@pytest.mark.parametrize(
    ("text", "where"),
    [("model:\n\tmaxModelLen: 8192\n", "2:1"), ("model:\n  \tmaxModelLen: 8192\n", "2:3")],
    ids=["tab-indents", "tab-after-spaces"],
)
@pytest.mark.parametrize("command", ["render", "update"])
def test_a_tab_in_the_indentation_is_refused_naming_line_and_column(
    tmp_path: Path, capsys, command: str, text: str, where: str
):
    path = tmp_path / "values.yaml"
    path.write_text(text)
    if command == "render":
        lines = refused(capsys, "render", "-f", path, "--out", tmp_path / "out.yaml")
    else:
        lines = refused(capsys, "update", path, "--model-dir", QWEN3)
    assert lines == [
        f"{path}:{where}: a tab in the indentation; tabs are not allowed in YAML indentation: indent with spaces"
    ]
    untouched(tmp_path, path, text)


def test_a_tab_helm_takes_is_left_to_helm(tmp_path: Path, capsys):
    """A tab between a key and its value is YAML (1.2's separation space), and helm's reader takes
    it; ruamel.yaml does not. render does not refuse it; update, which must read the file to edit
    it, says why it cannot."""
    path = tmp_path / "values.yaml"
    text = "model:\n  maxModelLen:\t8192\n"
    path.write_text(text)
    code, _, err = run(capsys, "render", "-f", path, "--out", tmp_path / "out.yaml")
    assert code == 0, err
    assert "--max-model-len '8192'" in (tmp_path / "out.yaml").read_text(), "helm read the value after the tab"
    (tmp_path / "out.yaml").unlink()
    assert refused(capsys, "update", path, "--model-dir", QWEN3) == [
        f"{path}:2:15: a tab this tool's YAML reader (ruamel.yaml) does not take; replace it with a space"
    ]
    untouched(tmp_path, path, text)


def test_a_missing_file_is_named_and_a_url_is_left_to_helm():
    with pytest.raises(values_file.ValuesFileError, match=r"^nowhere\.yaml: no such file; give -f a values file"):
        render.check_values_files(["nowhere.yaml", "https://example.com/v.yaml", "-"])
    render.check_values_files(["https://example.com/v.yaml", "-", str(paths.VALUES_DIR / "qwen3-8b-a3-1p1d.yaml")])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Keys compare as helm's JSON has them: strings.
        ('ports:\n  1: a\n  "1": b\n', ["x.yaml:3: duplicate key ports.1"]),
        # An alias repeats a node, not a key; a merge key is not a duplicate.
        ("base: &b {a: 1}\none: *b\ntwo:\n  <<: *b\n  a: 2\n", []),
        # Every document of the file.
        ("a: 1\n---\nb: 1\nb: 2\n", ["x.yaml:4: duplicate key b"]),
        ("", []),
        ("# only a comment\n", []),
    ],
    ids=["int-and-string", "alias-and-merge", "documents", "empty", "comment"],
)
def test_duplicate_keys_are_found_as_helm_would_merge_them(text: str, expected: list[str]):
    found = values_file.problems(text, "x.yaml", strict=True)
    assert [line.split(";")[0] for line in found] == expected


def test_every_preset_passes_the_checks():
    for path in sorted(paths.VALUES_DIR.glob("*.yaml")):
        assert values_file.problems(path.read_text(), str(path), strict=True) == [], path
