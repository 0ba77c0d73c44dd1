"""Every citation of a doc resolves: a `docs/...md#anchor` path in a docstring, comment or page names a file that
exists and a heading it has, and every relative markdown link (`[text](../x.md#y)`) reaches its file and heading.
The specs moved into docs/methods/ once before (from a file outside the repository) and left ~80 dangling
citations; this keeps the next move honest. Plain text, no JAX: fast.
"""
import functools
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("jaxrl_reason", "experiments", "tests", "docs", "colabs", "README.md")
SUFFIXES = (".py", ".md", ".ipynb")

# A repository path to a doc, as docstrings and pages write it: docs/<...>.md, optionally with #anchor.
DOC_PATH = re.compile(r"(?<![\w/.-])((?:\.\./)*docs/[\w./-]*?\.md)(#[\w-]+)?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _files():
    for entry in SCANNED:
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            yield path
            continue
        for dirpath, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
            for f in sorted(files):
                if f.endswith(SUFFIXES) and f != os.path.basename(__file__):  # this file spells the patterns
                    yield os.path.join(dirpath, f)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, punctuation other than `-` and `_`
    dropped, spaces turned into `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(md_path: str) -> frozenset:
    """The anchors of a markdown file's headings (outside code fences), with GitHub's -1, -2 for repeats."""
    seen, out, fenced = {}, set(), False
    for line in open(md_path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def test_slug_matches_github():
    assert slug("Spec: the paper's run") == "spec-the-papers-run"
    assert slug("Advantages (`method.estimator`)") == "advantages-methodestimator"
    assert slug("Worked check [choice] ([spec](#spec))") == "worked-check-choice-spec"


def _references(path: str):
    """(line number, target path, anchor or None) of every doc citation in a file."""
    text = open(path, encoding="utf-8").read()
    here = os.path.dirname(path)
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for m in DOC_PATH.finditer(line):
            # a ../-prefixed path is relative to its page; a bare docs/... path to the repository root
            base = here if m.group(1).startswith("../") else ROOT
            out.append((lineno, os.path.normpath(os.path.join(base, m.group(1))), (m.group(2) or "")[1:] or None))
        if path.endswith(".md"):
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target) or DOC_PATH.fullmatch(target):
                    continue  # a URL, or a docs/ path already counted above
                file_part, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(here, file_part)) if file_part else path
                out.append((lineno, resolved, anchor or None))
    return out


CITING = sorted(p for p in _files() if _references(p))


@pytest.mark.parametrize("path", CITING, ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_citations_resolve(path):
    missing = []
    for lineno, target, anchor in _references(path):
        where = f"{os.path.relpath(path, ROOT)}:{lineno}"
        if not os.path.exists(target):
            missing.append(f"{where}: no file {os.path.relpath(target, ROOT)}")
        elif anchor and target.endswith(".md") and anchor not in anchors(target):
            missing.append(f"{where}: {os.path.relpath(target, ROOT)} has no heading #{anchor}")
    assert not missing, "dangling doc citations:\n" + "\n".join(missing)


def test_citations_were_found():
    """The scan sees the method specs' citations (a broken pattern would find none and pass every file)."""
    cited = {(os.path.relpath(t, ROOT), a) for p in CITING for _, t, a in _references(p)}
    assert ("docs/methods/cure.md", "spec-critique") in cited
    assert ("docs/methods/grpo.md", "spec-temperature") in cited
    assert len(CITING) > 50


def test_no_citation_of_the_old_spec_file():
    """The spec lives in docs/methods/ (README.md there maps the old section numbers); nothing cites the file
    that used to hold it outside the repository."""
    old = re.compile(r"METHODS(\.md)?\s*§|METHODS\.md")
    hits = [f"{os.path.relpath(p, ROOT)}:{i}" for p in _files()
            for i, line in enumerate(open(p, encoding="utf-8"), start=1) if old.search(line)]
    assert not hits, f"cite docs/methods/<page>.md#spec-... instead: {hits}"
