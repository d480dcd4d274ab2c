"""The answers as HTML pages the report displays (contextuality.report.html), and the report's categories."""

from __future__ import annotations

import re

import pandas as pd

from conftest import PROJECT
from contextuality.report.html import CATEGORIES, frame_markdown, markdown_html, page

CLAIMS = """# The paper's claims, checked on this run

Verdicts on **this run's** numbers; see `claims.csv` and [the paper](https://aclanthology.org/D19-1006/).

| claim | model | verdict | evidence |
|---|---|---|---|
| A1a: every layer is anisotropic | tiny random BERT | HOLDS | baseline 0.12-0.40 |
| A3 | tiny random GPT-2 | FAILS (exact: HOLDS) | last layer 0.46 \\| 0.98 |
| A9 | tiny random GPT-2 | N/A | no Table 1 |

- one point, *emphasised*
- another <script>alert(1)</script>
"""


def test_a_claims_table_becomes_an_html_table_with_its_verdicts_marked():
    body = markdown_html(CLAIMS)
    assert "<h1>The paper&#x27;s claims, checked on this run</h1>" in body or "<h1>The paper's claims" in body
    rows = re.findall(r"<tr><td>.*?</tr>", body, re.S)
    assert len(rows) == 3 and "<th>verdict</th>" in body
    assert '<span class="verdict HOLDS">HOLDS</span>' in rows[0]
    assert '<span class="verdict FAILS">FAILS</span>' in rows[1] and '<span class="verdict HOLDS">HOLDS</span>' in rows[1]
    assert '<span class="verdict NA">N/A</span>' in rows[2]
    assert "last layer 0.46 | 0.98" in rows[1]  # an escaped pipe stays in its cell
    assert "<strong>this run&#x27;s</strong>" in body or "<strong>this run's</strong>" in body
    assert "<code>claims.csv</code>" in body and '<a href="https://aclanthology.org/D19-1006/">the paper</a>' in body
    assert "<li>one point, <em>emphasised</em></li>" in body
    assert "<script>" not in body and "&lt;script&gt;" in body  # text, never markup


def test_a_page_is_a_whole_document_with_no_script_and_nothing_fetched():
    html = page("claims", markdown_html(CLAIMS))
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html and "<script" not in html
    assert "src=" not in html and "<link" not in html


def test_a_table_with_floats_becomes_markdown_then_html_with_numbers_right_aligned():
    frame = pd.DataFrame({"layer": [0, 1], "self_similarity": [0.91234, float("nan")], "note": ["a|b", "c"]})
    markdown = frame_markdown(frame)
    assert markdown.splitlines()[2] == "| 0 | 0.912 | a\\|b |" and markdown.splitlines()[3] == "| 1 |  | c |"
    body = markdown_html(markdown)
    assert "<td class=num>0.912</td>" in body and "<td>a|b</td>" in body


def test_every_report_item_is_filed_under_the_question_it_answers():
    """Every category a rule names is one of the questions, and every figure has its caption."""
    rules = "\n".join(path.read_text() for path in (PROJECT / "workflow" / "rules").glob("*.smk"))
    assert 'category="' not in rules  # no category by kind ("Figures", "Tables"): by question, from CATEGORIES
    questions = {"1. The answers", "2. Anisotropy", "3. Context-specificity", "4. Word senses", "5. Geometry",
                 "6. Static embeddings"}
    assert set(CATEGORIES.values()) == questions
    from contextuality.paper import FIGURES
    from contextuality.senses.combine import SENSE_FIGURES

    report = PROJECT / "workflow" / "report"
    for name in (*FIGURES, *SENSE_FIGURES, "geometry", "rogue_dimensions", "table1"):
        assert (report / f"fig_{name}.rst").is_file(), name
    for caption in re.findall(r'caption="\.\./report/([^"{}]+)"', rules):
        assert (report / caption).is_file(), caption
    for name in ("claims", "summary", "table1"):  # the answers' pages (rule report_pages)
        assert (report / f"{name}.rst").is_file() and name in CATEGORIES
