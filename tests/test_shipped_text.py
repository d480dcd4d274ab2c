"""What the repository ships points only at what it ships: no reference to a spec, an issue or a file that stays
behind, and every relative link of its Markdown resolves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import PROJECT

# Text a user reads: the documentation, the configs and profiles, the report's captions, the rule files' comments,
# the benchmark scripts, and the reports the workflow writes (their byte-for-byte copies in tests/data/report/).
SHIPPED_SUFFIXES = {".md", ".rst", ".yaml", ".yml", ".smk", ".cff", ".sh", ".txt"}
SHIPPED_NAMES = {"Snakefile", "LICENSE"}
NOT_SHIPPED_TEXT = ("tests/", "resources/sts/", "resources/benchmarks/")  # test code, and third-party data as released
REPORTS = ["tests/data/report/full/claims.md", "tests/data/report/full/summary.md",
           "tests/data/report/small/claims.md", "tests/data/report/table1/table1.md"]  # fmt: skip

# References to what stays behind: the specs the project was built from, its issue tracker, and the private
# section numbering of those specs (their acceptance checks sat in a section seven, which the paper does not have).
# Each pattern is written so that it does not match itself: this file is scanned too.
DANGLING = [
    (
        re.compile(r"paper[-]spec|methods[ ]spec|reproduction[ ]spec|\bspecs?\.md\b|senses\.md|shared[/]spec"),
        "a spec file",
    ),
    (re.compile(r"\bspec(?:'s)?\s*§?\s*\d|\bspec(?:'s)?\s*§"), "a spec section"),
    (re.compile(r"§\s*[5-9]\b|§\s*[5-9]\.\d|§[7] A\d"), "a section the paper does not have"),
    (re.compile(r"\bissues? #?\d+\b", re.IGNORECASE), "an issue of the project's tracker"),
]
# Code and tests cite none of them either: a reader of a docstring or a test has only the repository, so a check says
# what it guards in place. tests/data/ holds fixtures and the reports' copies (the shipped text's scan reads those).
CODE_AND_TESTS = ("src/", "tests/", "workflow/", "benchmarks/", ".ci/")
CODE_SUFFIXES = {".py", ".sh", ".smk", ".md", ".yaml", ".yml", ".txt", ""}
NOT_OURS = ("tests/data/",)


def tracked_files() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True).stdout.split()


def shipped_text_files() -> list[str]:
    files = tracked_files()
    shipped = [f for f in files if (Path(f).suffix in SHIPPED_SUFFIXES or Path(f).name in SHIPPED_NAMES)
               and not f.startswith(NOT_SHIPPED_TEXT)]  # fmt: skip
    return shipped + REPORTS


def code_and_test_files() -> list[str]:
    files = tracked_files()
    return [f for f in files if f.startswith(CODE_AND_TESTS) and not f.startswith(NOT_OURS)
            and Path(f).suffix in CODE_SUFFIXES]  # fmt: skip


@pytest.mark.parametrize("files", [shipped_text_files, code_and_test_files], ids=["shipped-text", "code-and-tests"])
def test_no_file_names_a_spec_issue_or_section_that_does_not_ship(files):
    found = []
    for name in files():
        for number, line in enumerate((PROJECT / name).read_text(encoding="utf-8").splitlines(), 1):
            for pattern, what in DANGLING:
                if match := pattern.search(line):
                    found.append(f"{name}:{number}: {match.group(0)!r} names {what}")
    assert not found, "\n".join(found)


def test_the_patterns_find_what_they_are_for():
    # each citation split in two, so that this file does not cite it
    cited = ["(issue" + " 36)", "Issue" + " 42, hole 4", "spec" + " §" + "5.2", "the spec's" + " §3", "spec" + " 4.4"]
    cited += ["paper-" + "spec", "spec senses" + ".md §3(b)", "§" + "7 A1", "§" + "6.5"]
    kept = ["§4.1, Fig. 1", "the paper's §4.3", "Definition 3", "issues of the tracker", "a spec of the format"]
    assert all(any(p.search(text) for p, _ in DANGLING) for text in cited)
    assert not any(p.search(text) for p, _ in DANGLING for text in kept)


def test_the_claims_cite_the_papers_own_sections():
    from contextuality.paper import CLAIMS

    allowed = re.compile(r"(abstract|§4\.[1-3]|Figs?\. \d(-\d)?|Table 1|released statistics|[ ,;()])+")
    assert all(allowed.fullmatch(claim.source) for claim in CLAIMS), [c.source for c in CLAIMS]


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.mark.parametrize("name", [f for f in shipped_text_files() if f.endswith(".md") and not f.startswith("tests/")])
def test_every_relative_link_in_the_markdown_resolves(name):
    path = PROJECT / name
    broken = []
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor on the page
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{name}: links to files that do not ship: {broken}"
