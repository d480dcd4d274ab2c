"""The atlas's findings are written from a run's tables (report/atlas_findings.py): every number in the text is
the table's, the claims whose verdict depends on the stand-in are exactly those that differ, and a stale block is
found by --check."""

from __future__ import annotations

import pandas as pd
import pytest

from contextuality.report.atlas_findings import (
    BEGIN,
    END,
    changed_verdicts,
    findings_block,
    main,
    readme_block,
)

ATLAS_NUMBERS = {
    "anisotropy_max": (0.412, 0.903, 0.617, 0.051),
    "anisotropy_max_depth": (0.5, 1.0, 0.75, 1.0),
    "self_similarity_adj_min": (0.644, 0.183, 0.251, 0.702),
    "self_similarity_adj_min_depth": (1.0, 0.8667, 1.0, 1.0),
    "intra_sentence_adj_top": (0.331, -0.012, 0.094, 0.21),
    "mev_max": (0.041, 0.22, 0.118, 0.01),
    "senses_auroc_best": (0.631, 0.613, 0.642, 0.52),
    "senses_auroc_shape": (0.604, 0.592, 0.598, 0.51),
    "cka_adjacent_mean": (0.91, 0.97, 0.95, 0.99),
    "closest_cka": (0.55, 0.61, 0.61, 0.2),
}


def atlas_table() -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "model": ["minilm", "smollm2", "gemma", "random-gpt2"],
            "label": ["all-MiniLM-L6-v2", "SmolLM2-135M-Instruct", "Gemma-3-270m", "random GPT-2"],
            "kind": ["encoder", "decoder", "decoder", "decoder"],
            "training": ["sentence-encoder", "instruct", "pretrained", "random"],
            "closest_model": ["gemma", "gemma", "smollm2", "minilm"],
        }
    )
    return table.assign(**{column: list(values) for column, values in ATLAS_NUMBERS.items()})


def claims_table() -> pd.DataFrame:
    rows = []
    verdicts = {  # model: (A1b, A5b, A2, W1)
        "minilm": ("HOLDS", None, None, "HOLDS"),
        "smollm2": ("HOLDS", "FAILS", "FAILS", "FAILS"),
        "gemma": ("HOLDS", "HOLDS", "FAILS", "HOLDS"),
        "random-gpt2": ("FAILS", None, None, "FAILS"),
    }
    paper_model = {"minilm": "bert", "smollm2": "gpt2", "gemma": "gpt2", "random-gpt2": None}
    for model, statuses in verdicts.items():
        for claim, status in zip(("A1b", "A5b", "A2", "W1"), statuses, strict=True):
            if status is not None:
                rows.append(
                    {
                        "model": model,
                        "paper_model": paper_model[model],
                        "stand_in": paper_model[model] is not None,
                        "claim": claim,
                        "statement": f"statement of {claim}",
                        "status": status,
                    }
                )
    return pd.DataFrame(rows)


def test_the_claims_that_change_verdict_are_exactly_those_two_stand_ins_disagree_on():
    changed = changed_verdicts(claims_table())
    # A2 fails on both GPT-2 stand-ins and A1b holds on both; the senses' W1 depends on the stand-in too
    assert [(paper, claim) for paper, claim, _ in changed] == [("gpt2", "A5b"), ("gpt2", "W1")]
    assert changed[0][2] == {"gemma": "HOLDS", "smollm2": "FAILS"}


def test_every_number_of_the_findings_is_the_tables():
    atlas, claims = atlas_table(), claims_table()
    block = findings_block(atlas, claims)
    for column, values in ATLAS_NUMBERS.items():
        digits = 2 if column.endswith("_depth") else 3
        for value in values:
            assert f"{value:.{digits}f}" in block, (column, value)
    # the paper's claims per model: random-gpt2 is not a stand-in, A5b is not about it
    line = next(line for line in block.splitlines() if line.startswith("| A5b:"))
    assert [cell.strip() for cell in line.split("|")[1:-1]] == ["A5b: statement of A5b", "–", "FAILS", "HOLDS", "–"]
    assert "**A5b** (GPT-2): Gemma-3-270m HOLDS, SmolLM2-135M-Instruct FAILS." in block
    assert "| W1" not in block  # the senses' claims have their own table (the atlas's senses_W columns)


def test_the_readme_paragraph_names_the_range_and_the_claims_that_depend_on_the_stand_in():
    text = readme_block(atlas_table(), claims_table())
    assert "3 trained models and 1 untrained controls" in text
    assert "peak anisotropy 0.41-0.90" in text  # trained models only: the control's 0.05 is not in the range
    assert "adjusted self-similarity down to 0.18 (SmolLM2-135M-Instruct, relative depth 0.87)" in text
    assert "for GPT-2, A5b (Gemma-3-270m HOLDS vs SmolLM2-135M-Instruct FAILS)" in text
    assert text.endswith("![The atlas](docs/figures/atlas.png)")


def test_the_command_rewrites_only_the_block_and_check_finds_a_stale_one(tmp_path, capsys):
    tables = tmp_path / "tables"
    tables.mkdir()
    atlas_table().to_csv(tables / "atlas.csv", index=False)
    claims_table().to_csv(tables / "claims.csv", index=False)
    findings, readme = tmp_path / "findings.md", tmp_path / "README.md"
    findings.write_text(f"# Findings\n\nbefore\n{BEGIN}\nold text\n{END}\nafter\n")
    readme.write_text(f"intro\n{BEGIN}\n{END}\n")
    assert main([str(tables), "--findings", str(findings), "--readme", str(readme), "--check"]) == 1
    assert "old text" in findings.read_text()  # --check changes nothing
    assert main([str(tables), "--findings", str(findings), "--readme", str(readme)]) == 0
    text = findings.read_text()
    assert text.startswith("# Findings\n\nbefore\n") and text.endswith(f"{END}\nafter\n") and "old text" not in text
    assert main([str(tables), "--findings", str(findings), "--readme", str(readme), "--check"]) == 0
    capsys.readouterr()
    (tables / "atlas.csv").write_text(atlas_table().assign(anisotropy_max=0.5).to_csv(index=False))
    assert main([str(tables), "--findings", str(findings), "--check"]) == 1
    assert "stale" in capsys.readouterr().err


@pytest.mark.parametrize(
    "problem, expected",
    [
        ("no markers", "holds 0 '<!-- atlas-findings:begin -->' and 0"),
        ("no atlas", "atlas.csv: not there; run `snakemake atlas`"),
        ("old atlas", "lacks the columns ['anisotropy_max']"),
    ],
)
def test_a_missing_marker_or_table_is_one_line(tmp_path, capsys, problem, expected):
    tables = tmp_path / "tables"
    tables.mkdir()
    if problem != "no atlas":
        atlas = atlas_table().drop(columns=["anisotropy_max"] if problem == "old atlas" else [])
        atlas.to_csv(tables / "atlas.csv", index=False)
    claims_table().to_csv(tables / "claims.csv", index=False)
    findings = tmp_path / "findings.md"
    findings.write_text("no markers here\n")
    assert main([str(tables), "--findings", str(findings)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_the_findings_of_the_smoke_runs_atlas(smoke_run, tmp_path):
    tables = smoke_run / "results" / "tables"
    findings = tmp_path / "findings.md"
    findings.write_text(f"{BEGIN}\n{END}\n")
    assert main([str(tables), "--findings", str(findings)]) == 0
    atlas = pd.read_csv(tables / "atlas.csv")
    text = findings.read_text()
    for row in atlas.itertuples():
        assert f"| {row.label}: {row.kind}, {row.training} | {row.anisotropy_max:.3f} " in text
