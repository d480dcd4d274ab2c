"""Any corpus of sentences (corpus.sources): text, table and datasets sources, each refusing malformed input
in one line naming file:line; the STS-only steps planned for the STS sources only."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import job_counts, run_snakemake, write_config
from contextuality.corpus.sources import OTHER_COLUMNS, load_source
from contextuality.corpus.sts import CorpusError
from contextuality.workflow.schema import load_settings
from contextuality.workflow.checks import ConfigError, check_settings


def corpus(**keys):
    return load_settings({"models": {}, "corpus": keys}).corpus


def test_text_source_cleans_numbers_and_records(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_bytes('The bank "rose".\r\nA river bank.\n  Ünïcode works  \n'.encode())
    sentences, record = load_source(corpus(source="text", path=str(path)))
    assert list(sentences.columns) == OTHER_COLUMNS
    assert sentences["text"].tolist() == ["The bank rose.", "A river bank.", "Ünïcode works"]
    assert sentences["sentence_id"].tolist() == [0, 1, 2] and sentences["source_id"].tolist() == ["line 1", "line 2", "line 3"]
    assert (sentences["year"] == 0).all() and sentences["score"].isna().all() and (sentences["pair_id"] == -1).all()
    import hashlib

    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and record["n_sentences"] == 3
    again, _ = load_source(corpus(source="text", path=str(path)))
    pd.testing.assert_frame_equal(again, sentences)  # stable ids and values
    limited, _ = load_source(corpus(source="text", path=str(path), max_sentences=2))
    assert len(limited) == 2


@pytest.mark.parametrize("content, message", [
    (b"fine\n\xff\xfe broken\n", r"mine.txt:2: not UTF-8 .*re-encode the file as UTF-8"),
    (b"fine\n\n", r"mine.txt:2: empty sentence .*fix or remove that entry"),
    (b'one\n  ""  \n', r"mine.txt:2: empty sentence"),
    (b"", r"mine.txt: holds no line"),
])  # fmt: skip
def test_text_source_refuses_malformed_lines(tmp_path, content, message):
    path = tmp_path / "mine.txt"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        load_source(corpus(source="text", path=str(path)))


def test_table_source_csv_and_parquet(tmp_path):
    frame = pd.DataFrame({"sid": ["a1", "b7", "c3"], "topic": ["x", "y", "x"], "sentence": ["One.", "Two, too.", "Three"]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet")
    for name in ("t.csv", "t.parquet"):
        sentences, record = load_source(corpus(source="table", path=str(tmp_path / name), text_column="sentence",
                                               id_column="sid", group_column="topic"))  # fmt: skip
        assert sentences["text"].tolist() == ["One.", "Two, too.", "Three"]
        assert sentences["source_id"].tolist() == ["a1", "b7", "c3"] and sentences["domain"].tolist() == ["x", "y", "x"]
        assert sentences["split"].unique().tolist() == ["table"] and record["n_input"] == 3


def test_table_source_refuses_malformed_tables(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,text\na,One.\nb,   \nc,Three.\n")
    with pytest.raises(CorpusError, match=r"t.csv:3: empty sentence"):  # the header is line 1
        load_source(corpus(source="table", path=str(path), id_column="id"))
    path.write_text("id,text\na,One.\nb,Two.\na,Three.\n")
    with pytest.raises(CorpusError, match=r"t.csv:4: id 'a' \('id'\) appears again; allowed: one row per id"):
        load_source(corpus(source="table", path=str(path), id_column="id"))
    with pytest.raises(CorpusError, match=r"t.csv: no column 'sentence' \(corpus.text_column\); the table has \['id', 'text'\]"):
        load_source(corpus(source="table", path=str(path), text_column="sentence"))
    pd.DataFrame({"text": ["a", None]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(CorpusError, match=r"t.parquet row 2: 'text' is (None|nan), not text"):
        load_source(corpus(source="table", path=str(tmp_path / "t.parquet")))
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(CorpusError, match=r"reads .csv, .tsv or .parquet files, not '.xlsx'"):
        load_source(corpus(source="table", path=str(tmp_path / "t.xlsx")))


def test_datasets_source_reads_a_saved_folder_and_a_data_folder(tmp_path):
    import datasets

    rows = {"text": ["First one.", "Second one."], "label": [0, 1]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "saved"))
    sentences, record = load_source(corpus(source="datasets", path=str(tmp_path / "saved"), split="train"))
    assert sentences["text"].tolist() == rows["text"] and sentences["source_id"].tolist() == ["row 0", "row 1"]
    assert len(record["sha256"]) == 64
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "test.jsonl").write_text("\n".join(json.dumps({"sentence": t, "k": i}) for i, t in enumerate(rows["text"])))
    sentences, _ = load_source(corpus(source="datasets", path=str(folder), split="test", text_column="sentence",
                                      id_column="k"))  # fmt: skip
    assert sentences["text"].tolist() == rows["text"] and sentences["source_id"].tolist() == ["0", "1"]
    with pytest.raises(CorpusError, match=r"no column 'body' \(corpus.text_column\)"):
        load_source(corpus(source="datasets", path=str(folder), split="test", text_column="body"))
    with pytest.raises(CorpusError, match=r"no split 'validation'|cannot load split 'validation'"):
        load_source(corpus(source="datasets", path=str(tmp_path / "saved"), split="validation"))


def test_corpus_settings_are_checked_before_any_job():
    def problems(**keys):
        with pytest.raises(ConfigError) as err:
            check_settings(load_settings({"models": {}, "corpus": keys}))
        return str(err.value)

    assert "corpus.path: missing; corpus.source 'text'" in problems(source="text")
    assert "a hub dataset is read only at a pinned commit" in problems(source="datasets", dataset="org/name")
    assert "exactly one of a local dataset folder" in problems(source="datasets", path="x", dataset="org/name", revision="0" * 40)
    assert "unused with corpus.source 'bundled'" in problems(path="mine.txt")


def test_a_text_corpus_plans_no_sts_step_and_claims_say_why(tmp_path, base_config):
    """A dry run of a text corpus: corpus reads the file and records it, sts_pairs is not planned; the summary
    (claims.md) takes the corpus record."""
    (tmp_path / "mine.txt").write_text("\n".join(f"Sentence number {i} about a bank." for i in range(50)) + "\n")
    config = dict(base_config, corpus={"source": "text", "path": "mine.txt"})
    done = run_snakemake(tmp_path, "-n", "--cores", "1", configfile=write_config(tmp_path / "c.yaml", config))
    counts = job_counts(done.stdout)
    assert counts.get("corpus") == 1 and "sts_pairs" not in counts, counts
    assert "results/corpus/corpus.json" in done.stdout


def test_corpus_section_of_claims():
    from contextuality.report.claims import corpus_section

    assert corpus_section(None) == []
    lines = corpus_section({"source": "text", "path": "mine.txt", "sha256": "ab" * 32, "n_sentences": 1234})
    assert "1,234 sentences from `mine.txt`" in "\n".join(lines) and "There are no STS pairs or gold" in "\n".join(lines)


@pytest.mark.slow
def test_wordnet_glosses_are_the_second_corpus(wordnet_root, tmp_path):
    """WordNet 3.0's definitions and examples, as the wordnet_glosses rule writes them, through the table source."""
    from contextuality.senses.glosses import write_glosses

    table = write_glosses(wordnet_root, tmp_path / "glosses.parquet")
    assert list(pd.read_parquet(tmp_path / "glosses.parquet").columns) == ["id", "kind", "text"]  # the data contract's
    assert table["kind"].value_counts().to_dict() == {"definition": 117_659, "example": 48_339}
    sentences, record = load_source(corpus(source="table", path=str(tmp_path / "glosses.parquet"), id_column="id",
                                           group_column="kind"))  # fmt: skip
    assert record["n_sentences"] == 165_998 and sentences["source_id"].iloc[0].endswith(".def")
    assert np.isclose(165_998 / 25_088, 6.6, atol=0.05)


def test_own_corpus_claims_are_na_on_another_corpus():
    """A9d and A10 compare with numbers the paper measured on STS: N/A, saying why, on another corpus."""
    from contextuality.report.claims import evaluate_claims

    layers = pd.DataFrame({"model": "m", "layer": range(4), "self_similarity": [0.9, 0.6, 0.5, 0.4],
                           "intra_sentence": 0.5, "mev": 0.3, "baseline_cosine": 0.2, "baseline_mev": 0.1,
                           "adjusted_self_similarity": 0.3, "adjusted_intra_sentence": 0.3, "adjusted_mev": 0.2})  # fmt: skip
    record = {"source": "text", "path": "mine.txt", "sha256": "0" * 64, "n_sentences": 10}
    sts = evaluate_claims({"m": layers}, None, {"m": "M"}, {"m": "bert"}).set_index("claim")
    other = evaluate_claims({"m": layers}, None, {"m": "M"}, {"m": "bert"}, corpus=record).set_index("claim")
    for claim in ("A9d", "A10"):
        assert other.loc[claim, "status"] == "N/A" and "not the paper's" in other.loc[claim, "evidence"]
    assert (sts.drop(index=["A9d", "A10"])["status"] == other.drop(index=["A9d", "A10"])["status"]).all()


def test_sts_record_digests_each_release_file_and_the_sentences(tmp_path):
    from contextuality.corpus.sources import file_sha256, sts_record

    release = tmp_path / "sts" / "2012" / "test" / "STS.input.x.txt"
    release.parent.mkdir(parents=True)
    release.write_text("a\tb\n")
    sentences = pd.DataFrame({"text": ["a", "b"]})
    record = sts_record("bundled", sentences, release_files=[str(release)])
    assert record["files"] == {"2012/test/STS.input.x.txt": file_sha256(release)} and record["n_sentences"] == 2
    import hashlib

    assert record["sentences_sha256"] == hashlib.sha256(b"a\nb").hexdigest()
