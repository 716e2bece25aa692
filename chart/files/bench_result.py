"""mooncake-pd bench_result: prints the benchmark Job's result on one line after a marker, where
`mooncake-pd bench` finds it in the Job's log (the Job's files are gone with its pod).

Usage: python3 bench_result.py /results/result.json
Python 3.8+, standard library only.
"""

from __future__ import annotations

import json
import sys

MARKER = "mooncake-pd-benchmark-result: "


def result_line(text: str) -> str:
    """`vllm bench serve --save-result`'s JSON, compact, after the marker."""
    return MARKER + json.dumps(json.loads(text), separators=(",", ":"))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: bench_result.py <result.json>", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        print(result_line(f.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
