"""Figures 1-4 from synthetic layers tables, and the report captions."""

import base64
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from docutils.core import publish_parts
from jinja2 import Environment

from conftest import synthetic_layers_table
from contextuality.report import figures, model_figures

REPORT_DIR = Path(__file__).resolve().parents[1] / "workflow" / "report"
CAPTIONS = (
    "fig_anisotropy.rst",
    "fig_self_similarity.rst",
    "fig_intra_sentence.rst",
    "fig_mev.rst",
    "summary.rst",
    "claims.rst",
    "layers_table.rst",
    "context_words.rst",
    "workflow.rst",
    "fig_geometry.rst",
    "fig_rogue_dimensions.rst",
    "postprocess_table.rst",
    "atlas.rst",
    "fig_atlas.rst",
    "fig_atlas_cka.rst",
)


def layers_table(model, baseline, self_adj, intra_adj, adj_mev, baseline_mev, ci=0.02):
    """A layers.parquet-shaped table from adjusted MEV (none at layer 0); CIs of the raw measures are value ± ci."""
    mev = np.asarray(adj_mev, float) + np.asarray(baseline_mev, float)
    mev[0] = np.nan  # MEV is not computed at layer 0
    return synthetic_layers_table(model, baseline, self_adj, intra_adj, mev, baseline_mev, ci=ci, mev_ci=ci / 4,
                                  n_words=50, n_sentences=20, norm_mean=5.0)  # fmt: skip


@pytest.fixture(scope="module")
def run():
    """Three models of depth 2, 6 and 12; the GPT-2-like one has baseline 0.6 in layers 2-8 and 0.98 on top."""
    gpt2 = layers_table(
        "gpt2",
        [0.61, 0.64, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.62, 0.67, 0.76, 0.98],
        np.linspace(0.3, 0.01, 13),
        np.r_[0.2, 0.18, np.zeros(11)],
        np.full(13, -0.6),
        np.full(13, 0.95),
    )
    bert = layers_table(
        "tiny_bert",
        [0.1, 0.2, 0.3, 0.4, 0.5, 0.45, 0.35],
        np.linspace(0.85, 0.2, 7),
        np.full(7, 0.3),
        np.linspace(0.0, 0.03, 7),
        np.full(7, 0.02),
    )
    elmo = layers_table(
        "elmo",
        [0.008, 0.157, 0.136],
        [0.99, 0.59, 0.51],
        [0.31, 0.43, 0.49],
        [0.0, 0.03, 0.035],
        [0.087, 0.003, 0.004],
        ci=0.0,
    )
    tables = {"elmo": elmo, "tiny_bert": bert, "gpt2": gpt2}
    labels = {"elmo": "ELMo (original)", "tiny_bert": "BERT-tiny (stand-in)", "gpt2": "GPT-2 small"}
    return tables, labels


def check_files(png: Path, pdf: Path) -> None:
    """Both files exist, carry the right magic bytes and are not trivially small; beside them the figure's page
    for the report shows the PNG and offers the PDF as its download, both inside it (nothing fetched)."""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert png.stat().st_size > 10_000 and pdf.stat().st_size > 5_000
    page = png.with_suffix(".page.html").read_text()
    png_data, pdf_data = (base64.b64encode(path.read_bytes()).decode() for path in (png, pdf))
    image = f'<img class="figure" alt="{png.stem}" src="data:image/png;base64,{png_data}">'
    download = f'<a download="{pdf.name}" href="data:application/pdf;base64,{pdf_data}">'
    assert image in page and download in page and page.index(download) < page.index(image)
    assert "<script" not in page and "<link" not in page


def test_plot_all_writes_every_figure(tmp_path, run):
    tables, labels = run
    written = figures.plot_all(tables, labels, tmp_path / "figs")
    assert set(written) == set(figures.FIGURES)
    for name, (png, pdf) in written.items():
        assert png == tmp_path / "figs" / f"{name}.png" and pdf == tmp_path / "figs" / f"{name}.pdf"
        check_files(png, pdf)
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(
        f"{n}.{ext}" for n in figures.FIGURES for ext in ("png", "pdf", "page.html")
    )  # no temporary files left


def test_relative_depth_and_single_figure(tmp_path, run):
    tables, labels = run
    png, pdf = figures.plot_mev(tables, labels, tmp_path / "m.png", tmp_path / "m.pdf", relative_depth=True)
    check_files(png, pdf)
    png, pdf = figures.plot_line_figure(
        "anisotropy", tables, labels, tmp_path / "a.png", tmp_path / "a.pdf", relative_depth=True
    )
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
    first = figures.plot_line_figure("intra_sentence", tables, labels, tmp_path / "1.png", tmp_path / "1.pdf")
    second = figures.plot_line_figure("intra_sentence", tables, labels, tmp_path / "2.png", tmp_path / "2.pdf")
    assert first[1].read_bytes() == second[1].read_bytes()
    assert first[0].read_bytes() == second[0].read_bytes()


@pytest.mark.parametrize("name", CAPTIONS)
def test_report_captions_render(name):
    """Captions render through jinja and docutils as Snakemake's report does, without warnings."""

    class Snakemake:
        config = {"models": {"minilm": {"label": "all-MiniLM-L6-v2", "stands_for": "bert"}, "tiny": {}}}

    text = Environment().from_string((REPORT_DIR / name).read_text()).render(snakemake=Snakemake)
    parts = publish_parts(
        text, writer="html", settings_overrides={"report_level": 2, "halt_level": 2, "warning_stream": False}
    )
    assert len(parts["body"]) > 100


def geometry_tables(depth=6, d=16, seed=0):
    """A layers table with the geometry columns, its postprocess.csv and rogue_dimensions.csv."""
    rng = np.random.default_rng(seed)
    layers = layers_table(
        "m",
        np.linspace(0.1, 0.6, depth + 1),
        np.linspace(0.8, 0.3, depth + 1),
        np.full(depth + 1, 0.3),
        np.full(depth + 1, 0.01),
        np.full(depth + 1, 0.02),
    )
    n = depth + 1
    layers = layers.assign(
        baseline_cosine_exact=layers["baseline_cosine"] - 0.005, adjusted_self_similarity_exact=layers["adjusted_self_similarity"] + 0.005,
        adjusted_intra_sentence_exact=layers["adjusted_intra_sentence"] + 0.005, adjusted_mev_exact=layers["adjusted_mev"],
        rogue_top1_share=np.linspace(0.2, 0.8, n), rogue_top3_share=np.linspace(0.4, 0.9, n), rogue_top10_share=np.linspace(0.7, 1.0, n),
        isoscore=np.linspace(0.5, 0.1, n), isoscore_star=np.linspace(0.55, 0.12, n), effective_rank=np.linspace(14, 6, n),
        twonn_dimension=np.linspace(9, 5, n), after_final_norm=(np.arange(n) == depth).astype(int),
        **{f"null_{null}_{c}": np.full(n, v) for null in ("gaussian", "permuted")
           for c, v in (("isoscore", 0.95), ("isoscore_star", 1.0), ("effective_rank", 15.8), ("twonn_dimension", 12.0),
                        ("rogue_top1_share", np.nan if null == "gaussian" else 0.3))},
    )  # fmt: skip
    layers["rogue_anisotropy"] = layers["baseline_cosine_exact"]
    post = pd.concat(
        [
            layers.assign(postprocess=name, adjusted_self_similarity=layers["adjusted_self_similarity"] - shift)
            for name, shift in (("none", 0.0), ("standardize", 0.05), ("abtt", 0.1))
        ]
    )
    rows = []
    for layer, total in zip(layers["layer"], layers["rogue_anisotropy"]):
        contributions = rng.dirichlet(np.ones(d) * 0.3) * total
        order = np.argsort(-contributions)
        for rank, dim in enumerate(order, start=1):
            rows.append(
                {
                    "model": "m",
                    "layer": layer,
                    "dimension": dim,
                    "rank": rank,
                    "contribution": contributions[dim],
                    "share": contributions[dim] / total,
                }
            )
    return layers, post, pd.DataFrame(rows)


@pytest.mark.parametrize("relative_depth", [False, True])
def test_geometry_dashboard_and_rogue_dimensions(tmp_path, relative_depth):
    layers, post, rogue = geometry_tables()
    check_files(
        *model_figures.plot_geometry_dashboard(
            layers, post, "M", tmp_path / "g.png", tmp_path / "g.pdf", relative_depth=relative_depth
        )
    )
    check_files(
        *model_figures.plot_rogue_dimensions(
            rogue, layers, "M", tmp_path / "r.png", tmp_path / "r.pdf", relative_depth=relative_depth
        )
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "g.page.html",
        "g.pdf",
        "g.png",
        "r.page.html",
        "r.pdf",
        "r.png",
    ]


def test_top_rogue_dimensions_follow_each_layers_leaders():
    rogue = pd.DataFrame({"layer": [0, 0, 0, 1, 1, 1], "dimension": [5, 2, 9, 2, 7, 5], "rank": [1, 2, 3, 1, 2, 3],
                          "contribution": [0.5, 0.2, 0.1, 0.9, 0.05, 0.01], "share": np.nan})  # fmt: skip
    assert model_figures.top_rogue_dimensions(rogue, per_layer=2) == [2, 5, 7]
    assert model_figures.top_rogue_dimensions(rogue, per_layer=1, limit=1) == [2]
    assert model_figures.top_rogue_dimensions(rogue.iloc[0:0]) == []


def test_per_model_figures_without_geometry_columns(tmp_path, run):
    """A table measured without the geometry panel (or an older one) still gives both figures, mostly empty."""
    tables, _ = run
    check_files(
        *model_figures.plot_geometry_dashboard(tables["gpt2"], None, "GPT-2", tmp_path / "g.png", tmp_path / "g.pdf")
    )
    empty = pd.DataFrame(columns=["model", "layer", "dimension", "rank", "contribution", "share"])
    check_files(
        *model_figures.plot_rogue_dimensions(empty, tables["gpt2"], "GPT-2", tmp_path / "r.png", tmp_path / "r.pdf")
    )


def test_every_figure_is_written_through_one_function_in_one_pair_of_formats():
    """The ("png", "pdf") pair was written out in four places and each writer set its own metadata: one home
    now (``figure_files``), and every figure file goes through its ``save_figure``."""
    from conftest import PROJECT

    outside = []
    for path in sorted([*(PROJECT / "src").rglob("*.py"), *(PROJECT / "workflow").rglob("*.smk"),
                        *(PROJECT / "workflow").rglob("*.py")]):  # fmt: skip
        if path.name == "figure_files.py":
            continue
        text = path.read_text()
        outside += [f"{path.name}: {needle}" for needle in ('"png", "pdf"', ".savefig(") if needle in text]
    assert outside == []


def test_every_figure_name_has_one_drawer_and_a_caption():
    from contextuality.paper import FIGURES
    from contextuality.report import sense_figures
    from contextuality.report.figure_files import MODEL_FIGURES
    from contextuality.senses.combine import SENSE_FIGURES

    assert tuple(sense_figures._drawers()) == SENSE_FIGURES
    assert tuple(figures._PLOTTERS) == FIGURES
    names = (*FIGURES, *MODEL_FIGURES, *SENSE_FIGURES)
    assert [name for name in names if not (REPORT_DIR / f"fig_{name}.rst").is_file()] == []
