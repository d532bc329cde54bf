"""The shipped files speak of the product only.

README.md, docs/, rankcast/, the tests, the Makefile and pyproject.toml must not carry words of
how the work on rankcast was organised (numbered work sessions, who measured what, branch
and worktree names, issue numbers as history), paths of the machines it ran on, or
references to documents outside the repository. Measurements name the hardware they ran
on (docs/BENCHMARKS.md, the benchmarks' `hardware_label`), never "this machine".

This module is the only file allowed to spell the patterns out.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve()

PATTERNS = {
    "a numbered work session": r"(?i)\bstops? \d+\b",
    "a helper as a worker": r"(?i)\bhelpers?'s?(?!\w)|\(helper\b|\b(?:another|other|the) helpers?\b(?= (?:ran|runs|measured|run|bench|branch))",
    "a lead as a worker": r"(?i)\blead-s\d+|\(lead\b|\blead's\b|\bthe lead\b",
    "a worktree or branch": r"(?i)\bworktrees?\b|\bbranch(?:es)? `[\w./-]+`|\bmerged `?main`?|\bon `main`",
    "a machine path": r"(?<![\w.~/])/(?:tmp|work|home|Users|root|private/var)/",
    "an unnamed machine": r"(?i)\b(?:this|that|these|quiet|loaded|noisy|shared|the session's) machines?\b|\bload average\b|\bthese \d+ cores\b",
    "an issue number as history": r"(?i)\bissues? #?\d+\b|\(#\d+\)",
    "a document outside the repository": r"\bCONTRACT\b|\bARCHITECTURE\b|CONTRACT\.md|shared/design|\.\./(?:shared|papers|notes)/",
    "what was tried and dropped": r"(?i)\btried,? (?:and )?(?:not kept|dropped|left out)\b|\bnot kept\b|\bnot merged\b|\btried and\b",
    "a timestamp of a session": r"\b\d\d:\d\d(?:-\d\d:\d\d)? UTC\b",
}


def shipped_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    for ext in ("*.py", "*.yaml", "*.yml", "*.toml", "*.txt", "*.cfg"):
        files += sorted((ROOT / "rankcast").rglob(ext))
    files += sorted(p for p in (ROOT / "tests").rglob("*.py") if p.resolve() != SELF)
    return [p for p in files if p.is_file()]


def findings(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the line) for every pattern found in ``text``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pat in PATTERNS.items():
            if re.search(pat, line):
                out.append((n, what, line.strip()))
    return out


def test_the_patterns_catch_what_they_are_for():
    caught = ["Refitted (stop 44) on the bench", "a helper's run beside it", "(lead, 21:23-22:08 UTC)",
              "on branch `betree-top5`", "scripts in /tmp/betree13 on the session's machine",
              "measured on this machine", "load average 1 to 3", "Covering routing (issue 12; paper)",
              "see ../shared/design/CONTRACT.md", "Tried and not kept: a cap", "Ray on this machine (real, 2 cores)"]
    for text in caught:
        assert findings(text), text
    fine = ["a helper function of the kernel", "the search stops when the bound falls", "leads to a re-evaluation",
            "branch-free row selection", "tempfile.mkdtemp()", "hdfs://namenode/rankcast", "file:///mnt/shared/rankcast",
            "2-core x86_64, AMD EPYC, 24 GB", "the contract (docs/contract.md)", "~/.rankcast/state"]
    for text in fine:
        assert not findings(text), text


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_file_speaks_of_the_product_only(path):
    found = findings(path.read_text(errors="replace"))
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{n}: {what}: {line[:120]}" for n, what, line in found)


def test_docs_that_the_code_names_exist():
    """A docstring or message that sends the reader to docs/<page>.md names a page that exists."""
    missing = set()
    for path in (ROOT / "rankcast").rglob("*.py"):
        for page in re.findall(r"\bdocs/([\w-]+\.md)", path.read_text()):
            if not (ROOT / "docs" / page).exists():
                missing.add(f"{path.relative_to(ROOT)}: docs/{page}")
    assert not missing, sorted(missing)


def test_bench_reports_and_plots_name_their_hardware(tmp_path):
    """Every benchmark's JSON records the hardware it ran on and every plot is saved through
    ``save_figure``, which writes ``hardware_label()`` on it (read at run time)."""
    import json
    import os

    from rankcast.bench._common import hardware, hardware_label, write_json

    hw = hardware()
    assert hw["cores"] == (os.cpu_count() or 1) and hw["cpu"] and hw["arch"]
    label = hardware_label(hw)
    assert label.startswith(f"{hw['cores']}-core {hw['arch']}, ") and hw["cpu"] in label
    assert hardware_label({"cores": 2, "arch": "x86_64", "cpu": "AMD EPYC", "memory_gib": 23.5}) == \
        "2-core x86_64, AMD EPYC, 24 GB"
    write_json({"figure": 1.0}, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["hardware"] == hw
    direct = [p.name for p in (ROOT / "rankcast" / "bench").glob("*.py")
              if p.name != "_common.py" and re.search(r"\bfig\.savefig\(|plt\.savefig\(", p.read_text())]
    assert not direct, f"bench plots saved without their hardware label: {direct}"
