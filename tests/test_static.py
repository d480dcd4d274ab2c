"""Static embeddings and word benchmarks (contextuality.static), each against a known answer."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contextuality import paper
from contextuality.report import table1
from contextuality.static import embeddings
from contextuality.static import scoring as st

BENCHMARKS = Path(__file__).resolve().parents[1] / "resources" / "benchmarks"


def _emb(mapping: dict[str, list[float]]) -> embeddings.StaticEmbedding:
    """A hand-made embedding (rows are L2-normalised by the constructor)."""
    return embeddings.StaticEmbedding.from_arrays(list(mapping), np.array(list(mapping.values()), dtype=np.float32))


def _questions(*rows: str) -> pd.DataFrame:
    return pd.DataFrame([r.split() for r in rows], columns=["a", "b", "c", "d"])


# --------------------------------------------------------------------------- analogy


def test_analogy_lands_exactly_on_queen():
    h = np.sqrt(0.5)
    emb = _emb(
        {"man": [1, 0, 0], "woman": [0, 1, 0], "king": [0.5, -0.5, h], "queen": [-0.5, 0.5, h], "apple": [0, 0, -1]}
    )
    target = emb.vectors[emb.index["king"]] - emb.vectors[emb.index["man"]] + emb.vectors[emb.index["woman"]]
    np.testing.assert_allclose(target, emb.vectors[emb.index["queen"]], atol=1e-6)
    result = st.score_analogy(emb, _questions("man king woman queen"))
    assert result == st.TaskScore(1.0, 1.0, 1)


def test_analogy_excludes_question_words():
    # king - man + woman is closest to king itself; only excluding it makes queen the answer.
    emb = _emb(
        {
            "man": [1, 0, 0, 0],
            "woman": [1, 0.01, 0, 0],
            "king": [0, 0, 1, 0],
            "queen": [0, 0.5, 1, 0],
            "apple": [0, 0, 0, 1],
        }
    )
    sims = emb.vectors @ (emb.vectors[2] - emb.vectors[0] + emb.vectors[1])
    assert emb.words[int(np.argmax(sims))] == "king"
    assert st.score_analogy(emb, _questions("man king woman queen")).score == 1.0


def test_analogy_oov_answer_is_wrong_and_counts_in_coverage():
    h = np.sqrt(0.5)
    emb = _emb({"man": [1, 0, 0], "woman": [0, 1, 0], "king": [0.5, -0.5, h], "queen": [-0.5, 0.5, h]})
    result = st.score_analogy(emb, _questions("man king woman queen", "man king woman empress"), chunk_size=1)
    assert result == st.TaskScore(0.5, 0.5, 2)


# --------------------------------------------------------------------------- similarity


def _write_rw(root: Path, rows: list[tuple[str, str, float]]) -> Path:
    path = root / "wordsim" / "faruqui" / "EN-RW-STANFORD.txt"
    path.parent.mkdir(parents=True)
    path.write_text("".join(f"{a}\t{b}\t{s}\n" for a, b, s in rows))
    return root


def _angles_embedding() -> embeddings.StaticEmbedding:
    """x and y0..y3 with cos(x, y_i) = cos(20 i degrees), strictly decreasing in i."""
    angles = np.deg2rad([0, 20, 40, 60])
    vectors = {"x": [1.0, 0.0]} | {f"y{i}": [np.cos(a), np.sin(a)] for i, a in enumerate(angles)}
    return _emb(vectors)


@pytest.mark.parametrize("human, rho", [([4.0, 3.0, 2.0, 1.0], 1.0), ([1.0, 2.0, 3.0, 4.0], -1.0)])
def test_similarity_spearman_on_tiny_file(tmp_path, human, rho):
    root = _write_rw(tmp_path, [("x", f"Y{i}", s) for i, s in enumerate(human)])
    pairs = st.load_rw(root)
    assert pairs["word2"].tolist() == ["y0", "y1", "y2", "y3"]  # lower-cased
    result = st.score_similarity(_angles_embedding(), pairs)
    assert result.score == pytest.approx(rho)
    assert result.coverage == 1.0 and result.n_items == 4


def test_similarity_oov_gets_mean_vector_and_coverage():
    emb = _emb({"a": [1, 0], "b": [0, 1]})
    np.testing.assert_allclose(emb.lookup(["zzz"])[0][0], [0.5, 0.5])
    # cos(a, b) = 0 < cos(a, mean) = 0.707 < cos(a, a) = 1: rho = 1 only if zzz gets the mean vector.
    pairs = pd.DataFrame({"word1": ["a", "a", "a"], "word2": ["b", "zzz", "a"], "score": [1.0, 2.0, 3.0]})
    result = st.score_similarity(emb, pairs)
    assert result.score == pytest.approx(1.0)
    assert result.coverage == pytest.approx(2 / 3)
    assert st.score_similarity(emb, pairs.assign(word1=["a", "qqq", "qqq"])).coverage == pytest.approx(1 / 3)


# --------------------------------------------------------------------------- categorization


def test_purity_perfect_and_imperfect():
    assert st.cluster_purity(["a", "a", "b", "b", "c"], [2, 2, 0, 0, 1]) == 1.0
    assert st.cluster_purity([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]) == pytest.approx(5 / 6)
    assert st.cluster_purity([0, 0, 1, 1], [0, 0, 0, 0]) == 0.5


def test_categorization_separable_clusters_have_purity_one():
    rng = np.random.default_rng(0)
    centres = np.eye(3) * 10
    words = {f"w{c}{i}": centres[c] + rng.normal(scale=0.1, size=3) for c in range(3) for i in range(5)}
    items = pd.DataFrame({"word": list(words), "category": [w[1] for w in words]})
    result = st.score_categorization(_emb(words), items, seed=0)
    assert result == st.TaskScore(1.0, 1.0, 15)


# --------------------------------------------------------------------------- SemEval scorer


def test_semeval_score_is_mean_spearman_over_categories():
    emb = _emb({"a": [1, 0], "b": [0, 1], "c": [1, 1], "d": [-1, 1]})
    # prototype difference a - b = (1, -1); pair difference dots: (a,b) 2, (c,b) ~0.71, (b,a) -2.
    pairs = pd.DataFrame(
        {
            "category": ["1a"] * 3 + ["1b"] * 3,
            "split": "test",
            "word1": ["a", "c", "b", "a", "c", "b"],
            "word2": ["b", "b", "a", "b", "b", "a"],
            "score": [30.0, 10.0, -20.0, -30.0, -10.0, 20.0],
        }
    )
    data = st.SemEval2012(prototypes={"1a": [("a", "b")], "1b": [("a", "b")]}, pairs=pairs)
    assert st.score_semeval2012(emb, data).score == pytest.approx(0.0)  # mean of +1 and -1
    data = st.SemEval2012(prototypes={"1a": [("a", "b")], "1b": [("b", "a")]}, pairs=pairs)
    assert st.score_semeval2012(emb, data) == st.TaskScore(pytest.approx(1.0), 1.0, 6)


# --------------------------------------------------------------------------- loaders on the real files


def test_similarity_loaders_counts():
    counts = {
        st.load_simlex999: 999,
        st.load_men: 3000,
        st.load_ws353: 353,
        st.load_rw: 2034,
        st.load_rg65: 65,
        st.load_mturk287: 287,
        st.load_ws353_relatedness: 252,
        st.load_ws353_similarity: 203,
    }
    for loader, n in counts.items():
        df = loader(BENCHMARKS)
        assert len(df) == n, loader.__name__
        assert df["score"].notna().all() and (df[["word1", "word2"]] != "").all().all()
        assert (df["word1"] == df["word1"].str.lower()).all()
    men = st.load_men(BENCHMARKS)
    assert men.iloc[0].tolist() == ["sun", "sunlight", 50.0]
    assert not men["word1"].str.contains(r"-[a-z]$").any()
    natural = st.load_men(BENCHMARKS, form="natural")
    assert len(natural) == 3000 and ("cat", "kittens") in set(zip(natural["word1"], natural["word2"]))
    assert st.load_simlex999(BENCHMARKS).iloc[0].tolist() == ["old", "new", 1.58]


def test_analogy_loaders_counts():
    google = st.load_google(BENCHMARKS)
    assert len(google) == 19544 and google["category"].nunique() == 14
    assert google.iloc[0].tolist() == ["athens", "greece", "baghdad", "iraq", "capital-common-countries"]
    msr = st.load_msr(BENCHMARKS)
    assert len(msr) == 8000 and msr["category"].nunique() == 16
    assert msr.iloc[0].tolist() == ["good", "better", "rough", "rougher", "JJ_JJR"]


def test_semeval_loader():
    data = st.load_semeval2012_2(BENCHMARKS)
    assert data.pairs["category"].nunique() == 79 and len(data.prototypes) == 79
    assert len(data.pairs) == 3218
    assert st.load_semeval2012_2(BENCHMARKS, which="test").pairs["category"].nunique() == 69
    assert data.prototypes["10b"] == [("smile", "friendliness"), ("lamentation", "grief"), ("hug", "affection")]
    assert data.prototypes["6a"][1] == ("bulwark", "flimsy")  # written "bulwark: flimsy"
    assert data.prototypes["4g"] == [("popular", "shy"), ("right", "bad"), ("believe", "deny")]
    assert all(len(p) >= 3 for p in data.prototypes.values())
    first = data.pairs[data.pairs["category"] == "10b"].iloc[0]
    assert (first["word1"], first["word2"], first["score"]) == ("laugh", "happiness", 50.0)


@pytest.mark.parametrize(
    "loader, n_words, n_categories",
    [(st.load_bless, 200, 17), (st.load_ap, 402, 21), (st.load_battig, 5231, 56), (st.load_essli_2c, 45, 9)],
)
def test_categorization_loaders_counts(loader, n_words, n_categories):
    df = loader(BENCHMARKS)
    assert len(df) == n_words and df["category"].nunique() == n_categories
    assert (df["word"] != "").all()


# --------------------------------------------------------------------------- embedding files


def test_trimming_and_lowercase_collision(tmp_path):
    path = tmp_path / "emb.txt"
    path.write_text("6 2\nThe 1 0\nthe 0 2\nApple 3 4\nAPPLE 0 1\nbanana 0 -5\ncherry 1 1\n")
    emb = embeddings.load_embedding_text(path, vocabulary=["THE", "apple", "Banana", "kiwi"])
    assert emb.words == ["the", "apple", "banana"]
    np.testing.assert_allclose(emb.vectors, [[0, 1], [0.6, 0.8], [0, -1]], atol=1e-7)  # lower-case "the" wins
    emb = embeddings.load_embedding_text(path)
    assert emb.words == ["the", "apple", "banana", "cherry"]


def test_write_read_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    words = ["alpha", "Beta", "gamma's", "naïve"]
    matrix = rng.standard_normal((4, 7)).astype(np.float32)
    path = embeddings.write_embedding_text(tmp_path / "pcs" / "layer_1.txt", words, matrix)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(len(line.split(" ")) == 8 for line in lines)
    assert [p.name for p in path.parent.iterdir()] == ["layer_1.txt"]
    emb = embeddings.load_embedding_text(path)
    assert emb.words == ["alpha", "beta", "gamma's", "naïve"]
    expected = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    np.testing.assert_allclose(emb.vectors, expected, rtol=1e-5)  # six significant digits
    with pytest.raises(ValueError):
        embeddings.write_embedding_text(tmp_path / "bad.txt", ["two words"], matrix[:1])


# --------------------------------------------------------------------------- evaluation and outputs


def test_evaluate_embedding_on_real_benchmarks():
    data = st.load_benchmarks(BENCHMARKS)
    vocab = sorted(set(data["SimLex999"]["word1"]) | set(data["AP"]["word"]) | set(data["Google"]["a"]))
    rng = np.random.default_rng(0)
    emb = embeddings.StaticEmbedding.from_arrays(vocab, rng.standard_normal((len(vocab), 16)).astype(np.float32))
    table = st.evaluate_embedding(emb, data, seed=0)
    assert table["task"].tolist() == list(st.TABLE1_TASKS)
    assert table.columns.tolist() == ["task", "metric", "score", "coverage", "n_items"]
    assert np.isfinite(table["score"]).all() and table["coverage"].between(0, 1).all()
    assert table.set_index("task").loc["AP", "coverage"] == 1.0
    assert table.set_index("task").loc["Google", "n_items"] == 19544


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # a four-word vocabulary
def test_a_scoring_job_writes_the_scores_of_its_embedding_on_the_run_vocabulary(tmp_path):
    from types import SimpleNamespace

    path = tmp_path / "glove.txt"
    path.write_text("4 2\nking 1 0\nqueen 0.9 0.1\nman 0 1\nwoman 0.1 0.9\n")
    pd.DataFrame({"word": ["King", "queen", "man"]}).to_parquet(tmp_path / "word_index.parquet")
    job = SimpleNamespace(
        input=SimpleNamespace(word_index=tmp_path / "word_index.parquet", benchmarks=BENCHMARKS),
        params=SimpleNamespace(seed=3),
        output=SimpleNamespace(scores=tmp_path / "scores.csv"),
    )
    st.write_scores(job, st.score_baseline_file, path, label="GloVe")
    expected = st.score_baseline_file(path, {"king", "queen", "man"}, BENCHMARKS, label="GloVe", seed=3)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "scores.csv"), expected, check_dtype=False)


def _results() -> pd.DataFrame:
    rows = []
    for model, layer, base in [("GloVe", np.nan, 0.30), ("BERT", 0, 0.20), ("BERT", 1, 0.40), ("GPT-2", 1, 0.10)]:
        for k, task in enumerate(st.TABLE1_TASKS):
            rows.append({"model": model, "layer": layer, "task": task, "score": base + 0.01 * k, "coverage": 0.9})
    return pd.DataFrame(rows)


def test_table1_bold_best_per_column(tmp_path):
    results = _results()
    # BERT layer 1 is best everywhere; on AP GloVe ties with it (0.48) and is bold too.
    results.loc[(results["model"] == "GloVe") & (results["task"] == "AP"), "score"] = 0.48
    out = [tmp_path / f"table1.{ext}" for ext in ("csv", "md", "tex")]
    table = table1.build_table1(results, *out)
    csv = pd.read_csv(out[0])
    assert csv.loc[csv["source"] == "this run", "method"].tolist() == [
        "GloVe",
        "BERT, Layer 0",
        "BERT, Layer 1",
        "GPT-2, Layer 1",
    ]
    assert (csv["source"] == "paper").sum() == len(paper.PAPER_TABLE1)
    assert "coverage_SimLex999" in csv.columns and len(table) == len(csv)
    md = out[1].read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
    bert1 = next(row for row in rows if row[0] == "BERT, Layer 1")  # this run's row comes first
    assert sum(cell.startswith("**") for cell in bert1) == 9
    glove = next(row for row in rows if row[0] == "GloVe")
    assert sum(cell.startswith("**") for cell in glove) == 1 and "**0.480**" in glove
    assert ["BERT, Layer 1", "0.315"] in [row[:2] for row in rows]  # the paper's row, not bold
    tex = out[2].read_text()
    assert tex.count(r"\textbf{") == 10 and r"\textbf{0.400}" in tex and "SemEval2012(2)" in tex


def test_table1_without_paper_rows(tmp_path):
    out = [tmp_path / f"t.{ext}" for ext in ("csv", "md", "tex")]
    table = table1.build_table1(_results(), *out, include_paper=False)
    assert set(table["source"]) == {"this run"} and "Paper" not in out[1].read_text()


def test_plot_scores_by_layer(tmp_path):
    table1.plot_scores_by_layer(_results(), tmp_path / "fig.png", tmp_path / "fig.pdf")
    assert (tmp_path / "fig.png").stat().st_size > 10_000 and (tmp_path / "fig.pdf").stat().st_size > 1_000


def test_paper_table1_data():
    assert len(paper.PAPER_TABLE1) == 12
    assert all(list(v) == list(paper.TABLE1_TASKS) for v in paper.PAPER_TABLE1.values())
    assert paper.PAPER_TABLE1["BERT, Layer 1"]["SemEval2012_2"] == 0.166
    assert paper.PAPER_TABLE1["GPT-2, Layer 12"]["MEN"] == -0.009
    assert list(paper.TABLE1_HEADERS) == list(paper.TABLE1_TASKS)
    assert paper.TABLE1_HEADERS["SemEval2012_2"] == "SemEval2012(2)"
    assert st.TABLE1_TASKS is paper.TABLE1_TASKS  # scoring's default tasks are the paper's


TABLE1_REPORTS = Path(__file__).resolve().parent / "data" / "report" / "table1"


def test_table1_is_written_byte_for_byte_as_before(tmp_path):
    """table1.csv/.md/.tex of a run with an odd label (LaTeX's special characters), a tie and an extra task.

    The expected files are in tests/data/report/table1/; CONTEXTUALITY_REDRAW_REPORTS=1 redraws them.
    """
    results = _results()
    results["model"] = results["model"].replace({"GPT-2": "GPT_2 & co #1 ~50% {x}^$"})
    results.loc[(results["model"] == "GloVe") & (results["task"] == "AP"), "score"] = 0.48
    extra = results[results["task"] == "AP"].assign(task="RG65", score=lambda frame: frame["score"] - 0.1)
    results = pd.concat([results, extra], ignore_index=True)
    out = [tmp_path / f"table1.{ext}" for ext in ("csv", "md", "tex")]
    table1.build_table1(results, *out)
    if os.environ.get("CONTEXTUALITY_REDRAW_REPORTS"):
        TABLE1_REPORTS.mkdir(parents=True, exist_ok=True)
        for path in out:
            (TABLE1_REPORTS / path.name).write_bytes(path.read_bytes())
    for path in out:
        assert path.read_bytes() == (TABLE1_REPORTS / path.name).read_bytes(), path.name
