"""The answers as HTML pages the report displays (contextuality.report.html), and the report's categories."""

from __future__ import annotations

import re

import pandas as pd

from conftest import PROJECT
from contextuality.report.html import ANSWERS, CATEGORIES, frame_markdown, markdown_html, page

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


def test_a_label_with_line_breaks_stays_in_its_cell_and_a_stray_pipe_line_ends():
    """A label's line breaks once ended its table row, and the loose "|" line after it made markdown_html loop for
    ever (a report job that never finished): a cell is one line, and every line is consumed."""
    frame = pd.DataFrame({"model": ["a", "b"], "label": ["Evil\n\n.. raw:: html\n\n   <script>x</script>", "fine"]})
    body = markdown_html(frame_markdown(frame))
    assert body.count("<tr>") == 3 and "<td>Evil .. raw:: html &lt;script&gt;x&lt;/script&gt;</td>" in body
    assert markdown_html("| a stray pipe line\nthen text") == "<p>| a stray pipe line then text</p>"


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
    for caption in re.findall(r'caption="([^"{}]+)"', rules):
        assert (report / caption).is_file(), caption
    # every item through common.smk's `shown` (one label: no format toggle, whose half-filled rows blank a page)
    assert len(re.findall(r"\breport\(", rules)) == 1 and "def shown(" in rules
    for name in ("claims", "summary", "table1"):  # the answers' pages (rule report_pages)
        assert (report / f"{name}.rst").is_file() and name in CATEGORIES
    for name in ("atlas", "atlas_cka"):  # the atlas (rule atlas): its figures, and its table's page
        assert (report / f"fig_{name}.rst").is_file() and name in CATEGORIES
    assert (report / "atlas.rst").is_file()


# --------------------------------------------------------------------------------------------------
# The report of a real run: `snakemake --report report.zip`, and a headless browser on it

import os  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from conftest import run_snakemake  # noqa: E402
from workflow_runs import failure  # noqa: E402

# The browser: the one CONTEXTUALITY_BROWSER names (CI sets it: a missing browser or playwright fails there),
# else the first Chromium on PATH; with neither, the browser tests skip.
BROWSER_ENV = "CONTEXTUALITY_BROWSER"
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
# What the report's eye shows in place (anything else it downloads): every item must be one of these.
SHOWN = {"image/png": "img", "image/svg+xml": "img", "image/jpeg": "img", "text/html": "html"}


@pytest.fixture(scope="module")
def report(smoke_run, tmp_path_factory):
    """The smoke run's report.zip, made without --configfile (the run's recorded config), unpacked. It is written
    outside the run's folder, which the tests of another worker may be listing."""
    folder = tmp_path_factory.mktemp("report")
    result = run_snakemake(smoke_run, "--report", str(folder / "report.zip"))
    assert result.returncode == 0, failure(result)
    assert "the report is of the last run here" in result.stderr
    with zipfile.ZipFile(folder / "report.zip") as archive:
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


def browser_path() -> str:
    named = os.environ.get(BROWSER_ENV)
    if named:
        assert shutil.which(named), f"{BROWSER_ENV}={named}: no such browser"
        return shutil.which(named)
    found = next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None:
        pytest.skip(
            f"no Chromium on this machine (Debian: apt-get install chromium-headless-shell; or set {BROWSER_ENV})"
        )
    return found


@pytest.fixture(scope="module")
def report_page(report):
    """One headless Chromium page on the report, and the console errors and page errors it has logged."""
    executable = browser_path()
    if os.environ.get(BROWSER_ENV):
        from playwright import sync_api  # a browser was named: playwright must be there too
    else:
        sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = chromium.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(f"{error.name}: {error.message}"))
        page.goto((report / "report.html").as_uri())
        yield page, errors
        chromium.close()


def shown_rows(page, category: str, subcategory: str) -> list:
    """Open a category (and its subcategory, where it has several) as a reader does: its rows, one per item."""
    page.evaluate("() => app.setView({navbarMode: 'menu'})")
    page.get_by_text(category, exact=True).first.click()
    if page.evaluate("category => Object.keys(categories[category]).length", category) > 1:
        page.get_by_text(subcategory, exact=True).first.click()
    rows = page.locator("tbody tr").filter(has=page.locator("a"))
    rows.first.wait_for(timeout=10_000)
    return rows.all()


def shown_content(page, kind: str, uri: str) -> str:
    """What the eye shows of the item at ``uri``: an image, or a page's text (every image in it loaded, no
    wider than the view); an empty string for a blank one."""
    if kind == "img":
        image = page.locator(f'img[src="{uri}"]')
        image.wait_for(timeout=10_000)
        return "image" if image.evaluate("img => img.complete && img.naturalWidth > 0") else ""
    page.locator(f'iframe[src="{uri}"]').wait_for(timeout=10_000)
    body = page.frame_locator(f'iframe[src="{uri}"]').locator("body")
    body.wait_for(timeout=10_000)
    document = "b => b.ownerDocument.documentElement"
    overflow = body.evaluate(f"b => ({document})(b).scrollWidth - ({document})(b).clientWidth")
    assert overflow <= 1, f"{uri}: {overflow}px wider than the view (a wide table scrolls in its own box)"
    broken = body.evaluate("b => [...b.querySelectorAll('img')].filter(i => !(i.complete && i.naturalWidth)).length")
    return body.inner_text().strip() if broken == 0 else ""


def pdf_download(page, uri: str) -> bytes | None:
    """The file the shown page's download link gives (a figure's PDF), or None where the page offers none."""
    link = page.frame_locator(f'iframe[src="{uri}"]').locator("a[download]")
    if link.count() == 0:
        return None
    with page.expect_download(timeout=10_000) as download:
        link.click()
    assert download.value.suggested_filename.endswith(".pdf"), download.value.suggested_filename
    return Path(download.value.path()).read_bytes()


@pytest.mark.slow
def test_every_category_and_item_of_the_report_opens_in_a_browser_with_no_error(report_page, tmp_path):
    """Each question, each of its items shown by its eye (a figure's page: its PNG, its PDF downloaded; a table's
    page), no console or page error, nothing blank, a screenshot of each (under this test's tmp_path)."""
    page, errors = report_page
    started = time.monotonic()
    categories = page.evaluate("() => categories")
    results = page.evaluate("() => results")
    assert set(CATEGORIES.values()) <= set(categories), sorted(categories)
    shots = figures = 0
    for category, subcategories in categories.items():
        for subcategory, paths in subcategories.items():
            where = f"{category} / {subcategory}"
            kinds = {path: SHOWN.get(results[path]["mime_type"]) for path in paths}
            assert None not in kinds.values(), f"{where}: items only downloaded, not shown: {kinds}"
            rows = shown_rows(page, category, subcategory)
            assert not errors, f"{where}: {errors}"
            assert len(rows) == len(paths), f"{where}: {len(rows)} rows for {len(paths)} items (a format toggle?)"
            for row in rows:
                label = row.inner_text().strip()
                row.locator("a").first.click()  # the eye
                path = page.evaluate("() => app.state.resultPath")
                content = shown_content(page, kinds[path], results[path]["data_uri"])
                shots += 1
                page.screenshot(path=str(tmp_path / f"{shots:02d}-{Path(path).name}.png"))
                assert not errors, f"{where}, {label!r}: {errors}"
                assert content, f"{where}, {label!r}: a blank page ({tmp_path})"
                if path.endswith(".page.html"):  # a figure: the PNG shown, the PDF its download
                    pdf = pdf_download(page, results[path]["data_uri"])
                    assert pdf is not None and pdf.startswith(b"%PDF-"), f"{where}, {label!r}: no PDF to download"
                    figures += 1
    seconds = time.monotonic() - started
    print(
        f"{shots} items ({figures} figures, their PDFs downloaded) of {len(categories)} categories in {seconds:.1f} s"
    )
    print(f"screenshots in {tmp_path}")
    assert shots == sum(len(paths) for subcategories in categories.values() for paths in subcategories.values())


@pytest.mark.slow
def test_the_claims_page_shows_its_verdicts_in_the_browser(report_page):
    """Opened as a reader opens it: the first question, the claims' eye, its verdicts coloured in the table."""
    page, errors = report_page
    page.evaluate("() => app.setView({navbarMode: 'menu'})")
    page.get_by_text(ANSWERS, exact=True).first.click()
    page.locator("tr", has_text="the paper's claims, checked").locator("a").first.click()
    frame = page.frame_locator("iframe")
    frame.locator("table").first.wait_for(timeout=20_000)
    text = frame.locator("tr", has=frame.locator("span.verdict")).all_inner_texts()
    assert not errors, errors
    assert len(text) > 10 and any("HOLDS" in row for row in text) and any("FAILS" in row for row in text)
    assert any(row.startswith("A1b") for row in text)
