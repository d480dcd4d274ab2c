"""Figures 1-4 from synthetic layers tables, and the report captions."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from docutils.core import publish_parts
from jinja2 import Environment

from contextuality import figures

REPORT_DIR = Path(__file__).resolve().parents[1] / "workflow" / "report"
CAPTIONS = ("fig_anisotropy.rst", "fig_self_similarity.rst", "fig_intra_sentence.rst", "fig_mev.rst",
            "summary.rst", "claims.rst", "layers_table.rst", "context_words.rst", "workflow.rst")


def layers_table(model, baseline, self_adj, intra_adj, adj_mev, baseline_mev, ci=0.02):
    """A layers.parquet-shaped table; CIs of the raw measures are value ± ci."""
    b, bm = np.asarray(baseline, float), np.asarray(baseline_mev, float)
    self_raw, intra_raw = np.asarray(self_adj) + b, np.asarray(intra_adj) + b
    mev = np.asarray(adj_mev, float) + bm
    mev[0] = np.nan  # MEV is not computed at layer 0
    return pd.DataFrame({
        "model": model, "layer": np.arange(len(b)), "n_words": 50, "n_sentences_sampled": 20,
        "self_similarity": self_raw, "self_similarity_ci_low": self_raw - ci, "self_similarity_ci_high": self_raw + ci,
        "intra_sentence": intra_raw, "intra_sentence_ci_low": intra_raw - ci, "intra_sentence_ci_high": intra_raw + ci,
        "mev": mev, "mev_ci_low": mev - ci / 4, "mev_ci_high": mev + ci / 4, "mev_literal": mev, "mev_centered": mev,
        "baseline_cosine": b, "baseline_mev": bm, "adjusted_self_similarity": self_raw - b,
        "adjusted_intra_sentence": intra_raw - b, "adjusted_mev": mev - bm, "norm_mean": 5.0, "norm_std": 1.0,
    })


@pytest.fixture(scope="module")
def run():
    """Three models of depth 2, 6 and 12; the GPT-2-like one has baseline 0.6 in layers 2-8 and 0.98 on top."""
    gpt2 = layers_table(
        "gpt2", [0.61, 0.64, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.62, 0.67, 0.76, 0.98],
        np.linspace(0.3, 0.01, 13), np.r_[0.2, 0.18, np.zeros(11)], np.full(13, -0.6), np.full(13, 0.95))
    bert = layers_table("tiny_bert", [0.1, 0.2, 0.3, 0.4, 0.5, 0.45, 0.35], np.linspace(0.85, 0.2, 7),
                        np.full(7, 0.3), np.linspace(0.0, 0.03, 7), np.full(7, 0.02))
    elmo = layers_table("elmo", [0.008, 0.157, 0.136], [0.99, 0.59, 0.51], [0.31, 0.43, 0.49],
                        [0.0, 0.03, 0.035], [0.087, 0.003, 0.004], ci=0.0)
    tables = {"elmo": elmo, "tiny_bert": bert, "gpt2": gpt2}
    labels = {"elmo": "ELMo (original)", "tiny_bert": "BERT-tiny (stand-in)", "gpt2": "GPT-2 small"}
    return tables, labels


def check_files(png: Path, pdf: Path) -> None:
    """Both files exist, carry the right magic bytes and are not trivially small."""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert png.stat().st_size > 10_000 and pdf.stat().st_size > 5_000


def test_plot_all_writes_every_figure(tmp_path, run):
    tables, labels = run
    written = figures.plot_all(tables, labels, tmp_path / "figs")
    assert set(written) == set(figures.FIGURES)
    for name, (png, pdf) in written.items():
        assert png == tmp_path / "figs" / f"{name}.png" and pdf == tmp_path / "figs" / f"{name}.pdf"
        check_files(png, pdf)
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(
        f"{n}.{ext}" for n in figures.FIGURES for ext in ("png", "pdf"))  # no temporary files left


def test_relative_depth_and_single_figure(tmp_path, run):
    tables, labels = run
    png, pdf = figures.plot_mev(tables, labels, tmp_path / "m.png", tmp_path / "m.pdf", relative_depth=True)
    check_files(png, pdf)
    png, pdf = figures.plot_anisotropy(tables, labels, tmp_path / "a.png", tmp_path / "a.pdf", relative_depth=True)
    check_files(png, pdf)


def test_missing_values_and_columns_do_not_break_figures(tmp_path, run):
    tables, labels = run
    sparse = tables["tiny_bert"].drop(columns=["mev_ci_low", "mev_ci_high", "intra_sentence_ci_low"])
    sparse["adjusted_mev"] = np.nan  # nothing to draw in Figure 4 for this model
    written = figures.plot_all({"tiny_bert": sparse, "gpt2": tables["gpt2"]}, {}, tmp_path)
    for png, pdf in written.values():
        check_files(png, pdf)


def test_pdf_is_reproducible(tmp_path, run):
    tables, labels = run
    first = figures.plot_intra_sentence(tables, labels, tmp_path / "1.png", tmp_path / "1.pdf")
    second = figures.plot_intra_sentence(tables, labels, tmp_path / "2.png", tmp_path / "2.pdf")
    assert first[1].read_bytes() == second[1].read_bytes()
    assert first[0].read_bytes() == second[0].read_bytes()


@pytest.mark.parametrize("name", CAPTIONS)
def test_report_captions_render(name):
    """Captions render through jinja and docutils as Snakemake's report does, without warnings."""

    class Snakemake:
        config = {"models": {"minilm": {"label": "all-MiniLM-L6-v2", "stands_for": "bert"}, "tiny": {}}}

    text = Environment().from_string((REPORT_DIR / name).read_text()).render(snakemake=Snakemake)
    parts = publish_parts(text, writer="html",
                          settings_overrides={"report_level": 2, "halt_level": 2, "warning_stream": False})
    assert len(parts["body"]) > 100
