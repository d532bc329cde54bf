"""Every ```python block of README.md and docs/*.md runs, so the examples cannot drift from
the API.

A file's blocks run in order in one namespace, as a reader would paste them. A block that
needs Ray or Spark carries ``<!-- requires: ray -->`` or ``<!-- requires: spark -->`` on the
line above it: the file's test for that tier (marked ``ray`` / ``spark``) runs the file's
plain blocks and those. ``<!-- no-run -->`` is for shell sessions only: a python block never
carries it.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARK = re.compile(r"^<!--\s*(requires:\s*(ray|spark)|no-run)\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int           # 1-based line of the opening fence
    lang: str
    code: str
    requires: str | None
    no_run: bool


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of ``path``, with the marker on the line above each (blank
    lines between them allowed)."""
    out = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        start = i
        j = i + 1
        while j < len(lines) and not (lines[j].strip() == "```"):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j]]
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = _MARK.match(lines[k].strip()) if k >= 0 else None
        out.append(Block(path, start + 1, lang, "\n".join(body) + "\n",
                         mark.group(2) if mark and mark.group(2) else None,
                         bool(mark and mark.group(1) == "no-run")))
        i = j + 1
    return out


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _tier_params():
    params = []
    for path in DOCS:
        py = [b for b in blocks(path) if b.lang == "python"]
        if not py:
            continue
        params.append(pytest.param(path, None, id=_id(path)))
        for tier in ("ray", "spark"):
            if any(b.requires == tier for b in py):
                params.append(pytest.param(path, tier, id=f"{_id(path)}[{tier}]",
                                           marks=getattr(pytest.mark, tier)))
    return params


def test_there_are_docs_with_examples():
    assert (ROOT / "README.md").exists() and len(DOCS) > 1
    assert any(b.lang == "python" for p in DOCS for b in blocks(p))


@pytest.mark.parametrize("path", DOCS, ids=_id)
def test_python_blocks_are_never_marked_no_run(path):
    bad = [b.line for b in blocks(path) if b.lang == "python" and b.no_run]
    assert not bad, f"{_id(path)}: python blocks marked no-run at lines {bad}; only shell sessions may be"


@pytest.mark.parametrize("path", DOCS, ids=_id)
def test_every_fence_is_closed_and_marks_sit_on_blocks(path):
    text = path.read_text().splitlines()
    fences = sum(1 for ln in text if _FENCE.match(ln))
    assert fences % 2 == 0, f"{_id(path)}: an unclosed code fence"
    for n, ln in enumerate(text):
        if _MARK.match(ln.strip()):
            k = n + 1
            while k < len(text) and not text[k].strip():
                k += 1
            assert k < len(text) and _FENCE.match(text[k]), f"{_id(path)}, line {n + 1}: a marker with no block below"


def _run(path: Path, tier: str | None, monkeypatch) -> None:
    """Run the file's blocks of ``tier`` (None: the plain ones; a tier: the plain ones and
    that tier's) in order in one namespace, in a temporary working directory."""
    ns: dict = {"__name__": f"docs_{path.stem}"}
    with tempfile.TemporaryDirectory(prefix="rankcast-docs-") as tmp:
        monkeypatch.chdir(tmp)
        for b in blocks(path):
            if b.lang != "python" or (b.requires is not None and b.requires != tier):
                continue
            # padded to the block's place, so a traceback names the Markdown file's own line
            code = compile("\n" * b.line + b.code, str(path), "exec")
            try:
                exec(code, ns)
            except Exception as e:
                e.add_note(f"in the python block of {_id(path)} at line {b.line}")
                raise


@pytest.mark.parametrize("path,tier", _tier_params())
def test_doc_examples_run(path, tier, monkeypatch, request):
    if tier is not None:
        request.getfixturevalue("ray_session" if tier == "ray" else "spark")
    _run(path, tier, monkeypatch)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_\\]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@pytest.mark.parametrize("path", DOCS, ids=_id)
def test_relative_links_reach_a_file_and_heading(path):
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue                                   # an absolute URL
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md":
            heads = {_slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
            if anchor not in heads:
                bad.append(f"{target}: no such heading")
    assert not bad, f"{_id(path)}: {bad}"
