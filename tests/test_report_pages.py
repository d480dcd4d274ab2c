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
    assert (
        '<span class="verdict FAILS">FAILS</span>' in rows[1] and '<span class="verdict HOLDS">HOLDS</span>' in rows[1]
    )
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
    questions = {
        "1. The answers",
        "2. Anisotropy",
        "3. Context-specificity",
        "4. Word senses",
        "5. Geometry",
        "6. Static embeddings",
        "7. Across models",
    }
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
    for name in ("atlas", "atlas_cka"):  # the atlas (rule atlas): its figures, and its table's page
        assert (report / f"fig_{name}.rst").is_file() and name in CATEGORIES
    assert (report / "atlas.rst").is_file()


# --------------------------------------------------------------------------------------------------
# The report of a real run: `snakemake --report report.zip`, and a headless browser on it

import shutil  # noqa: E402
import zipfile  # noqa: E402

import pytest  # noqa: E402

from conftest import run_snakemake  # noqa: E402
from workflow_runs import audited_smoke_run, failure  # noqa: E402

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The smoke run's report.zip, made without --configfile (the run's recorded config), unpacked."""
    workdir = audited_smoke_run(tmp_path_factory)
    result = run_snakemake(workdir, "--report", "report.zip")
    assert result.returncode == 0, failure(result)
    assert "the report is of the last run here" in result.stderr
    folder = tmp_path_factory.mktemp("report")
    with zipfile.ZipFile(workdir / "report.zip") as archive:
        archive.extractall(folder)
    return folder / "report"


@pytest.mark.slow
def test_the_report_holds_the_answers_as_pages_filed_by_question(report):
    pages = {path.name: path for path in (report / "data").rglob("*.html")}
    assert {"claims.html", "summary.html", "table1.html", "layers.html"} <= set(pages)
    claims = pages["claims.html"].read_text()
    assert claims.count('<span class="verdict HOLDS">') > 3 and '<span class="verdict FAILS">' in claims
    assert "<table>" in pages["summary.html"].read_text() and "<table>" in pages["table1.html"].read_text()
    index = (report / "report.html").read_text()
    for question in set(CATEGORIES.values()):
        assert question in index


@pytest.mark.slow
def test_a_headless_browser_shows_the_claims_page_of_the_report_with_its_verdicts(report, tmp_path):
    """Opened as a reader opens it: the report's page, its first category, the claims' eye icon."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium-headless-shell)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=browser, args=["--no-sandbox"])
        page = chromium.new_page(viewport={"width": 1400, "height": 1000})
        page.goto((report / "report.html").as_uri())
        page.get_by_text("1. The answers").click()
        page.locator("tr", has_text="the paper's claims, checked").locator("a").first.click()
        frame = page.frame_locator("iframe")
        frame.locator("table").first.wait_for(timeout=20_000)
        rows = frame.locator("tr", has=frame.locator("span.verdict"))
        text = rows.all_inner_texts()
        page.screenshot(path=str(tmp_path / "claims.png"))
        chromium.close()
    assert len(text) > 10 and any("HOLDS" in row for row in text) and any("FAILS" in row for row in text)
    assert any(row.startswith("A1b") for row in text)
    assert (tmp_path / "claims.png").stat().st_size > 50_000  # a page of table, not a blank one
