"""The STS corpus: counts on the bundled release files, the paper's cleaning rules, bad input."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import STS_DIR, write_sts_release
from contextuality.corpus.sts import (
    CorpusError,
    build_corpus,
    pairs_to_sentences,
    read_release,
    write_bundled_pairs,
)

TEST_YEARS = [2012, 2013, 2014, 2015, 2016]


@pytest.fixture(scope="module")
def bundled_sentences(tmp_path_factory) -> pd.DataFrame:
    folder = tmp_path_factory.mktemp("corpus")
    write_bundled_pairs(STS_DIR, TEST_YEARS, False, folder / "pairs.jsonl")
    return build_corpus(
        folder / "sentences.parquet",
        source="bundled",
        pairs_jsonl=folder / "pairs.jsonl",
        years=TEST_YEARS,
        include_2012_train=False,
        max_sentences=None,
        hub_revisions={},
    )


def test_scored_pairs_per_year_match_the_releases(bundled_sentences):
    pairs = bundled_sentences.drop_duplicates(["year", "domain", "pair_id"]).groupby("year").size().to_dict()
    assert pairs == {2012: 3108, 2013: 1500, 2014: 3750, 2015: 3000, 2016: 1186}
    assert sum(pairs.values()) == 12544
    assert len(bundled_sentences) == 25088
    assert bundled_sentences["sentence_id"].tolist() == list(range(25088))


def test_order_is_stable_sent1_then_sent2(bundled_sentences):
    first = bundled_sentences.iloc[:4]
    assert first["domain"].tolist() == ["MSRpar"] * 4
    assert first["pair_id"].tolist() == [0, 0, 1, 1]
    assert first["side"].tolist() == [1, 2, 1, 2]
    line = (STS_DIR / "2012/test/STS.input.MSRpar.txt").read_text(encoding="utf-8").splitlines()[0]
    assert first["text"].iloc[0] == line.split("\t")[0].replace('"', "").strip()
    assert first["text"].iloc[1] == line.split("\t")[1].replace('"', "").strip()
    years = bundled_sentences["year"].to_numpy()
    assert (years[1:] >= years[:-1]).all()


def test_no_quote_survives_and_duplicates_are_kept(bundled_sentences):
    assert not bundled_sentences["text"].str.contains('"').any()
    assert bundled_sentences["text"].nunique() < len(bundled_sentences)  # 20,460 unique of 25,088


def test_2013_smt_is_skipped_with_a_warning(tmp_path, caplog):
    summary = write_bundled_pairs(STS_DIR, [2013], False, tmp_path / "pairs.jsonl")
    assert not any("SMT" in key.split("/")[-1] and key.endswith("/SMT") for key in summary)
    assert "not redistributable" in caplog.text


def test_2012_train_is_opt_in(tmp_path):
    summary = write_bundled_pairs(STS_DIR, [2012], True, tmp_path / "pairs.jsonl")
    train = sum(v["scored_pairs"] for k, v in summary.items() if k.startswith("2012/train"))
    assert train == 2234
    assert list(summary)[0].startswith("2012/train")


def test_unscored_pairs_are_skipped_and_quotes_removed(tmp_path):
    files = write_sts_release(
        tmp_path,
        2015,
        b'He said "hi.\tShe said hi.\nA dog runs.\tA cat runs.\nOne.\tTwo.\n',
        b"4.5\n\n1\n",
    )
    pairs, counts = read_release(files)
    assert [p["pair_id"] for p in pairs] == [0, 2]
    assert pairs[0]["sentence1"] == "He said hi."
    assert counts["unscored"] == 1
    sentences = pairs_to_sentences(pd.DataFrame(pairs))
    assert sentences["text"].tolist() == ["He said hi.", "She said hi.", "One.", "Two."]
    assert sentences["side"].tolist() == [1, 2, 1, 2]


def test_2016_files_have_four_columns(tmp_path):
    files = write_sts_release(tmp_path, 2016, b"a b\tc d\tsource 1\tsource 2\n", b"3\n")
    pairs, _ = read_release(files)
    assert (pairs[0]["sentence1"], pairs[0]["sentence2"]) == ("a b", "c d")


@pytest.mark.parametrize(
    "input_text, gold_text, message",
    [
        (b"no tab here\n", b"1\n", r"toy\.txt:1: no tab"),
        (b"a\tb\nc\td\te\n", b"1\n2\n", r"toy\.txt:2: 3 tab-separated columns"),
        (b"a\tb\nc\td\n", b"1\n", r"2 lines but its gold file .* has 1"),
        (b"a\tb\nc\xff\td\n", b"1\n2\n", r"toy\.txt:2: bytes that are not UTF-8"),
        (b"a\tb\n", b"high\n", r"gs\.toy\.txt:1: gold score 'high' is not a number"),
    ],
)
def test_malformed_release_files_name_file_and_line(tmp_path, input_text, gold_text, message):
    files = write_sts_release(tmp_path, 2014, input_text, gold_text)
    with pytest.raises(CorpusError, match=message):
        read_release(files)


def test_a_failed_parse_leaves_no_finished_output(tmp_path):
    root = tmp_path / "sts"
    write_sts_release(root, 2014, b"a\tb\nbroken line\n", b"1\n2\n", domain="deft-forum")
    out = tmp_path / "out" / "pairs.jsonl"
    with pytest.raises(CorpusError):
        write_bundled_pairs(root, [2014], False, out)
    assert not out.exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_max_sentences_keeps_the_first_sentences(bundled_sentences):
    pairs = bundled_sentences[bundled_sentences["side"] == 1][["year", "split", "domain", "pair_id", "score"]]
    pairs = pairs.assign(
        sentence1=bundled_sentences[bundled_sentences["side"] == 1]["text"].to_numpy(),
        sentence2=bundled_sentences[bundled_sentences["side"] == 2]["text"].to_numpy(),
    ).reset_index(drop=True)
    head = pairs_to_sentences(pairs, max_sentences=7)
    assert head["text"].tolist() == bundled_sentences["text"].iloc[:7].tolist()
