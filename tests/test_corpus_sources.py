"""Any corpus of sentences (corpus.sources): text, table and datasets sources, each refusing malformed input
in one line naming file:line; the STS-only steps planned for the STS sources only."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from contextuality.corpus.sources import OTHER_COLUMNS, load_source
from contextuality.corpus.sts import CorpusError
from contextuality.workflow.checks import ConfigError, check_settings
from contextuality.workflow.schema import load_settings


def corpus(**keys):
    return load_settings({"models": {}, "corpus": keys}).corpus


def test_text_source_cleans_numbers_and_records(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_bytes('The bank "rose".\r\nA river bank.\n  Ünïcode works  \n'.encode())
    sentences, record = load_source(corpus(source="text", path=str(path)))
    assert list(sentences.columns) == OTHER_COLUMNS
    assert sentences["text"].tolist() == ["The bank rose.", "A river bank.", "Ünïcode works"]
    assert sentences["sentence_id"].tolist() == [0, 1, 2] and sentences["source_id"].tolist() == [
        "line 1",
        "line 2",
        "line 3",
    ]
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
    frame = pd.DataFrame(
        {"sid": ["a1", "b7", "c3"], "topic": ["x", "y", "x"], "sentence": ["One.", "Two, too.", "Three"]}
    )
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
    with pytest.raises(
        CorpusError, match=r"t.csv: no column 'sentence' \(corpus.text_column\); the table has \['id', 'text'\]"
    ):
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
    (folder / "test.jsonl").write_text(
        "\n".join(json.dumps({"sentence": t, "k": i}) for i, t in enumerate(rows["text"]))
    )
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
    assert "exactly one of a local dataset folder" in problems(
        source="datasets", path="x", dataset="org/name", revision="0" * 40
    )
    assert "unused with corpus.source 'bundled'" in problems(path="mine.txt")


def test_a_text_corpus_plans_no_sts_step_and_claims_say_why(tmp_path, base_config):
    """A text corpus: corpus reads the file and records it, sts_pairs is not planned (``planned``: what `snakemake`
    builds by default, without starting it); the summary (claims.md) takes the corpus record."""
    from workflow_runs import planned

    (tmp_path / "mine.txt").write_text("\n".join(f"Sentence number {i} about a bank." for i in range(50)) + "\n")
    rules = planned(dict(base_config, corpus={"source": "text", "path": str(tmp_path / "mine.txt")}))
    assert rules["corpus"] == ["corpus"] and "sts_pairs" not in rules, rules


def test_corpus_section_of_claims():
    from contextuality.report.claims import corpus_section

    assert corpus_section(None) == []
    lines = corpus_section({"source": "text", "path": "mine.txt", "sha256": "ab" * 32, "n_sentences": 1234})
    assert "1,234 sentences from `mine.txt`" in "\n".join(lines) and "There are no STS pairs or gold" in "\n".join(
        lines
    )


@pytest.mark.slow
def test_wordnet_glosses_are_the_second_corpus(wordnet_root, tmp_path):
    """WordNet 3.0's definitions and examples, as the wordnet_glosses rule writes them, through the table source."""
    from contextuality.senses.lexicon.glosses import write_glosses

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


# The corpus sources trust nothing that comes in. Each case below was accepted (a wrong corpus measured
# with exit 0, a file outside the folder read) or ended in a traceback before.


@pytest.mark.parametrize("name, content, id_column, message", [
    # an unquoted comma in the first sentence: pandas made the first column the index, the label the text
    ("t.csv", "text,label\nThe cat sat on the mat, then it slept,1\nA dog.,0\n", None,
     r"t.csv:2: 3 fields, but the header \(line 1\) has 2 \('text', 'label'\)"),
    # a trailing comma on every row, as spreadsheets export it
    ("t.csv", "text,label\nOne.,1,\nTwo.,0,\n", None, r"t.csv:2: 3 fields, but the header \(line 1\) has 2"),
    ("t.tsv", "text\tlabel\nOne.\t1\nTwo.\t0\textra\n", None, r"t.tsv:3: 3 fields, but the header \(line 1\) has 2"),
    # a row missing its id field: it was read with an empty id
    ("t.csv", "id,text\na,One.\nTwo.\n", "id", r"t.csv:3: 1 field, but the header \(line 1\) has 2 \('id', 'text'\)"),
])  # fmt: skip
def test_a_table_row_with_more_or_fewer_fields_than_its_header_is_refused_naming_file_line_and_counts(
        tmp_path, name, content, id_column, message):  # fmt: skip
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CorpusError, match=message + r".*quote a field that holds"):
        load_source(corpus(source="table", path=str(path), id_column=id_column))


def test_quoted_separators_and_lines_inside_a_field_keep_their_line_numbers(tmp_path):
    path = tmp_path / "t.csv"
    # a blank line is skipped, as pandas did; a note over two lines is one field
    path.write_text('id,note,text\na,,"One, quoted."\n\nb,"two\nlines",Two.\nc,,\n')
    with pytest.raises(CorpusError, match=r"t.csv:6: empty sentence"):  # the row after the two-line field
        load_source(corpus(source="table", path=str(path), id_column="id"))
    path.write_text('id,note,text\na,,"One, quoted."\n')
    sentences, _ = load_source(corpus(source="table", path=str(path), id_column="id"))
    assert sentences["text"].tolist() == ["One, quoted."] and sentences["source_id"].tolist() == ["a"]


@pytest.mark.parametrize("source, name, content", [
    ("text", "mine.txt", b"\xef\xbb\xbfThe first.\nThe second.\n"),
    # two files joined (cat a.txt b.txt): the second one's mark starts a line
    ("text", "mine.txt", b"\xef\xbb\xbfThe first.\n\xef\xbb\xbfThe second.\n"),
    ("table", "t.csv", b"\xef\xbb\xbftext\nThe first.\nThe second.\n"),
    ("table", "t.tsv", b"\xef\xbb\xbftext\tid\nThe first.\t1\nThe second.\t2\n"),
])  # fmt: skip
def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path, source, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    sentences, _ = load_source(corpus(source=source, path=str(path)))
    assert sentences["text"].tolist() == ["The first.", "The second."]


def test_a_byte_order_mark_inside_a_line_is_refused(tmp_path):
    path = tmp_path / "mine.txt"  # two files joined where the first had no final newline
    path.write_bytes(b"The first.\xef\xbb\xbfThe second.\n")
    with pytest.raises(CorpusError, match=r"mine.txt:1: a byte-order mark \(U\+FEFF\) inside the sentence"):
        load_source(corpus(source="text", path=str(path)))


@pytest.mark.parametrize("listed", ["../secret.txt", "ABSOLUTE"])
def test_a_dataset_card_naming_a_file_outside_its_folder_is_refused(tmp_path, listed):
    (tmp_path / "secret.txt").write_text("A secret sentence.\n")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.txt").write_text("A sentence.\n")
    listed = str(tmp_path / "secret.txt") if listed == "ABSOLUTE" else listed
    (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                      f"    path: {listed}\n---\n")  # fmt: skip
    with pytest.raises(CorpusError, match=r"data/README.md: its data_files name .*secret.txt, outside the dataset "
                                          r"folder .*data; allowed: files inside the folder"):  # fmt: skip
        load_source(corpus(source="datasets", path=str(folder)))


def test_a_data_file_linking_out_of_the_dataset_folder_is_refused(tmp_path):
    (tmp_path / "secret.txt").write_text("A secret sentence.\n")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(
        CorpusError, match=r"data/train.txt is a symbolic link to .*secret.txt, outside the dataset folder"
    ):
        load_source(corpus(source="datasets", path=str(folder)))


def _saved_dataset(folder, split=None):
    import datasets

    datasets.Dataset.from_dict({"text": ["First one.", "Second one."]}, split=split).save_to_disk(str(folder))
    return folder


@pytest.mark.parametrize("case, message", [
    ("zero_byte_csv", r"t.csv: holds no header line; allowed: a CSV file whose first line names its columns"),
    ("damaged_parquet", r"t.parquet: not a readable Parquet file \(.*magic bytes.*\); .*replace it with an intact copy"),
    ("bad_json_line", r"data/train.jsonl:2: not a JSON object \(.*\); allowed: one JSON object per line"),
    ("mixed_formats", r"data: holds data files of 2 formats \(csv: a.csv; json: b.jsonl\), and datasets would read only "
                      r"the json ones; allowed: one format per folder"),
    ("split_of_a_single_dataset", r"saved: a single saved Dataset \(no split recorded\), not a DatasetDict, so "
                                  r"corpus.split 'test' selects nothing; leave corpus.split unset"),
    ("another_split_of_a_single_dataset", r"saved: a single saved Dataset \(split 'train'\), not a DatasetDict, so "
                                          r"corpus.split 'test' selects nothing"),
])  # fmt: skip
def test_an_unreadable_or_ambiguous_input_is_one_line_naming_it(tmp_path, case, message):
    folder = tmp_path / "data"
    if case == "zero_byte_csv":
        (tmp_path / "t.csv").write_bytes(b"")
        settings = corpus(source="table", path=str(tmp_path / "t.csv"))
    elif case == "damaged_parquet":
        (tmp_path / "t.parquet").write_bytes(b"PAR1 not a parquet file")
        settings = corpus(source="table", path=str(tmp_path / "t.parquet"))
    elif case == "bad_json_line":
        folder.mkdir()
        (folder / "train.jsonl").write_text('{"text": "One."}\n{"text": broken}\n{"text": "Three."}\n')
        settings = corpus(source="datasets", path=str(folder))
    elif case == "mixed_formats":
        folder.mkdir()
        (folder / "a.csv").write_text("text\nFrom the CSV file.\n")
        (folder / "b.jsonl").write_text('{"text": "From the JSON file."}\n')
        settings = corpus(source="datasets", path=str(folder))
    else:
        split = "train" if case.startswith("another") else None
        settings = corpus(source="datasets", path=str(_saved_dataset(tmp_path / "saved", split)), split="test")
    with pytest.raises(CorpusError, match=message):
        load_source(settings)


def test_a_single_saved_dataset_is_read_whole_when_no_split_is_asked(tmp_path):
    sentences, record = load_source(corpus(source="datasets", path=str(_saved_dataset(tmp_path / "saved"))))
    assert sentences["text"].tolist() == ["First one.", "Second one."] and record["split"] is None
    sentences, record = load_source(corpus(source="datasets", path=str(_saved_dataset(tmp_path / "s2", "test")),
                                           split="test"))  # fmt: skip
    assert len(sentences) == 2 and record["split"] == "test"


@pytest.mark.parametrize("keys, message", [
    ({"source": "text", "path": "x.txt", "text_column": "body"},
     "corpus.text_column: unused with corpus.source 'text' (one sentence per line, no columns)"),
    ({"source": "text", "path": "x.txt", "split": "test"}, "corpus.split: unused with corpus.source 'text'"),
    ({"source": "table", "path": "x.csv", "split": "test"}, "corpus.split: unused with corpus.source 'table'"),
    ({"source": "bundled", "text_column": "body"}, "corpus.text_column: unused with corpus.source 'bundled'"),
])  # fmt: skip
def test_a_corpus_key_its_source_does_not_read_is_refused_before_any_job(keys, message):
    from contextuality.workflow.checks import checked_settings

    with pytest.raises(ConfigError, match=re.escape(message)):
        checked_settings({"models": {"m": {"source": "random", "architecture": "bert"}}, "corpus": keys})
