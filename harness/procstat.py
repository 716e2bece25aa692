"""What /proc says of a process: its descendants, its CPU seconds and its memory (make scale and
make scale-datapath measure Kthena's controller, the router, the PD proxy and the stand-ins with
these). Linux only; standard library only."""

from __future__ import annotations

import os
from pathlib import Path


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        found.setdefault(ppid, []).append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children, found, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def argv0(pid: int) -> str:
    try:
        return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()).name
    except OSError:
        return ""


def find_process(root: int, name: str) -> int | None:
    """The process running binary `name` at or below `root` (Kthena's controller runs inside
    an unshare and sh wrapper, cluster.isolated)."""
    return next((p for p in descendants(root) if argv0(p) == name), None)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of `pid` so far, all its threads (/proc/<pid>/stat utime +
    stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, key: str) -> int | None:
    """A KiB figure of /proc/<pid>/status (VmRSS, VmHWM, ...); None where it has no such line."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def reset_peak(pid: int) -> bool:
    """Reset VmHWM (the peak resident set) of `pid` (clear_refs 5); False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True
