"""Guarantee: a label from the config is shown as written wherever it reaches the report: report.html (the
workflow description Snakemake renders with Jinja and docutils, and the job parameters it prints inside a
<script> element), the Markdown tables and the figures. No label runs a directive, includes a file or adds a
live <script>."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from docutils.core import publish_parts
from jinja2 import Environment

from conftest import PROJECT, job_counts, run_snakemake, write_config
from contextuality.report import figures
from contextuality.report.summary import summary_table
from workflow_runs import failure, smoke_config

SCRIPT = "<script>alert(1)</script>"
SECRET = "INCLUDED-FILE-CONTENT-5c1e"


def hostile_label(included) -> str:
    """A label holding a reStructuredText include of a local file and a raw HTML script."""
    return f"Evil\n\n.. include:: {included}\n\n.. raw:: html\n\n   {SCRIPT}\n\n`x <javascript:alert(2)>`_"


def _workflow_description(models: dict, **sections) -> str:
    """workflow/report/workflow.rst rendered as Snakemake renders it (Jinja, then docutils to HTML)."""
    env = Environment(trim_blocks=True, lstrip_blocks=True)  # Snakemake's environment for captions

    class Snakemake:
        config = {"models": models, **sections}

    text = (PROJECT / "workflow" / "report" / "workflow.rst").read_text()
    return publish_parts(env.from_string(text).render(snakemake=Snakemake), writer="html")["html_body"]


def test_the_reports_model_list_shows_a_label_as_text(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    html = _workflow_description(
        {
            "tiny-bert": {"label": hostile_label(secret), "stands_for": "bert"},
            "other": {"label": "GPT-2 (paper's tokenization) *x* & <b>"},
        }
    )
    assert SECRET not in html and SCRIPT not in html and 'href="javascript' not in html
    assert f".. include:: {secret}" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<strong>GPT-2 (paper's tokenization) *x* &amp; &lt;b&gt;</strong>" in html
    models = html.split("<ul", 1)[1].split("</ul>", 1)[0]
    assert models.count("<li>") == 2  # one item per model


def test_the_report_describes_the_corpus_that_was_run(tmp_path):
    """report.html said every corpus was STS 2012-2016; it names the corpus the config read, as text."""
    sts = _workflow_description({"m": {}}, corpus={"source": "bundled", "years": [2013, 2015], "max_sentences": 120})
    assert "the first 120 sentences of the SemEval STS sentences of 2013, 2015 (the bundled release files" in sts
    assert "STS pairs" not in sts
    path = f"{tmp_path}/mine.txt\n\n.. include:: {tmp_path}/secret.txt"
    (tmp_path / "secret.txt").write_text(SECRET)
    own = _workflow_description({"m": {}}, corpus={"source": "text", "path": path}, words={"min_occurrences": 3})
    assert "the SemEval STS sentences of" not in own and SECRET not in own
    shown = re.sub(r"</?span[^>]*>", "", own)  # docutils wraps hyphenated words of a literal in spans
    assert f'<tt class="docutils literal">{tmp_path}/mine.txt&nbsp; .. include:: {tmp_path}/secret.txt</tt>' in shown
    assert "It is not the paper's corpus: there are no STS pairs or gold scores" in own
    assert "at least 3 times; five in the paper" in own
    hub = _workflow_description({"m": {}}, corpus={"source": "datasets", "dataset": "org/name", "revision": "a" * 40})
    assert f'org/name at revision {"a" * 40}</tt> (corpus.source <tt class="docutils literal">datasets</tt>)' in hub


def test_labels_travel_to_the_reporting_jobs_as_inert_json():
    from contextuality.report.inert import from_inert_json, inert_json

    labels = {"a": "</script><script>alert(1)</script> & co", "b": "plain – é"}
    text = inert_json(labels)
    assert "<" not in text and ">" not in text and "&" not in text
    assert from_inert_json(text) == labels


def test_markdown_shows_a_label_as_written(tmp_path):
    from test_claims import paper_table  # the summary of a model under a hostile label

    label = f"x\n\n# Injected {SCRIPT}"
    summary_table({"m": paper_table("bert")}, {"m": label}, {"m": "bert"}, tmp_path / "s.md", tmp_path / "s.tex")
    text = (tmp_path / "s.md").read_text()
    assert SCRIPT not in text and "\n# Injected" not in text
    assert r"## x \# Injected \<script\>alert(1)\</script\> (`m`)" in text
    from contextuality.report.tables import md_cell, md_text

    assert md_text("<script>x</script>") == r"\<script\>x\</script\>"
    assert (
        md_text("a\n\n# heading [l](javascript:1) ![i](u) `c` *e* _u_")
        == r"a \# heading \[l\](javascript:1) \!\[i\](u) \`c\` \*e\* \_u\_"
    )
    assert md_text("1. item") == r"1\. item" and md_text("- item") == r"\- item"
    assert md_cell(md_text(r"a\|b")) == r"a\\\|b"  # a backslash, then an escaped pipe: one cell


def test_figures_draw_a_label_with_dollars_and_backslashes_as_text(tmp_path):
    from test_claims import paper_table

    label = r"cost $5 \foo $x^{ and more"  # matplotlib would read $5 \foo $ as math, and stop at \foo
    figures.plot_all({"m": paper_table("bert")}, {"m": label}, tmp_path)
    assert (tmp_path / "anisotropy.png").stat().st_size > 1000
    assert figures.plain_text(label) == r"cost \$5 \foo \$x^{ and more"
    assert figures.plain_text("_hidden") == "\N{ZERO WIDTH SPACE}_hidden"  # a leading _ would hide the legend entry


# --------------------------------------------------------------------------------------------------
# A real report of a finished smoke run, relabelled: only the reporting rules rerun


@pytest.mark.slow
def test_report_html_shows_hostile_labels_as_text(smoke_run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    config = smoke_config()
    config["models"]["tiny-bert"]["label"] = hostile_label(secret)
    config["models"]["tiny-gpt2"]["label"] = "</script><script>alert(2)</script> $\\foo$"
    configfile = write_config(tmp_path / "hostile.yaml", config)
    dry = run_snakemake(workdir, "-n", "--cores", "2", configfile=configfile)
    assert dry.returncode == 0, failure(dry)
    assert set(job_counts(dry.stdout)) - {"all", "total"} == {
        "figures",
        "model_figures",
        "senses_figures",
        "summary",
        "table1",
        "report_pages",
        "model_pages",
        "similarity_figures",
        "atlas",
    }, dry.stdout
    run = run_snakemake(workdir, "--cores", "2", configfile=configfile)
    assert run.returncode == 0, failure(run)
    report = run_snakemake(workdir, "--report", str(tmp_path / "report.html"), configfile=configfile)
    assert report.returncode == 0, failure(report)
    html = (tmp_path / "report.html").read_text()
    assert SECRET not in html  # the included file's text
    assert "<script>alert(" not in html and "</script><script>alert" not in html  # no live script
    description = (
        json.loads(html.split("var workflow_desc = ", 1)[1].split(";\n", 1)[0])
        if "var workflow_desc = " in html
        else html
    )
    assert "include:: " in description  # the label is there, as text
    summary = (workdir / "results" / "tables" / "summary.md").read_text()
    assert r"\<script\>alert(1)\</script\>" in summary and SCRIPT not in summary


# A Markdown link in a label or a corpus word became a live javascript: link in the HTML pages
HOSTILE_LINKS = [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "\x01javascript:alert(1)",
    "vbscript:msgbox(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "java&#115;cript:alert(1)",
    "file:///etc/passwd",
]


def _links(page_html: str) -> list[str]:
    return re.findall(r'<a href="([^"]*)"', page_html)


def test_report_pages_link_only_http_https_and_relative_addresses():
    from contextuality.report.html import markdown_html

    safe = "[paper](https://arxiv.org/abs/1909.00512) [plain](http://example.org/?a=1&b=2) [page](metrics/sts/m/layers.html) [here](#top)"
    assert _links(markdown_html(safe)) == [
        "https://arxiv.org/abs/1909.00512",
        "http://example.org/?a=1&amp;b=2",
        "metrics/sts/m/layers.html",
        "#top",
    ]
    for url in HOSTILE_LINKS:
        shown = markdown_html(f"| model | x |\n|---|---|\n| [click]({url}) | 1 |\n\n[click]({url})")
        assert "<a " not in shown, (url, shown)
        assert shown.count("[click](") == 2, shown  # shown as the text it is


def test_a_hostile_label_and_corpus_words_are_text_on_a_models_page():
    import pandas as pd

    from contextuality.report.html import frame_markdown, markdown_html, model_page
    from contextuality.report.tables import md_text

    words = json.dumps([["[a](javascript:alert(1))", 9], ["**bold**", 3], [SCRIPT, 2], ["`x`", 1]])
    layers = pd.DataFrame({"layer": [0], "self_similarity": [0.5], "massive_top_units": [words]})
    corpus_page = markdown_html(frame_markdown(layers))  # as it was read before, the words alone
    assert "<a " not in corpus_page and "<strong>" not in corpus_page and "<code>" not in corpus_page, corpus_page
    label = f"[me](javascript:alert(1)) **x** {SCRIPT}\n\n# Injected"
    shown = markdown_html(model_page(label, layers))
    assert "<a " not in shown and "<script>" not in shown and "<strong>" not in shown and "<h1>Injected" not in shown
    assert "[me](javascript:alert(1)) **x** &lt;script&gt;alert(1)&lt;/script&gt; # Injected: every layer" in shown
    assert "[a](javascript:alert(1))" in shown and "<td class=num>0.500</td>" in shown
    assert "<a " not in markdown_html(md_text("[l](javascript:1)"))  # a label escaped for Markdown stays text
