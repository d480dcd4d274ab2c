"""Guarantee: every kind of bad corpus input has one documented outcome (an error naming the file and
line, or kept/skipped with a count in the log), and sentence ids never silently change."""

from __future__ import annotations

import codecs
import logging
import shutil

import h5py
import pandas as pd
import pytest

from conftest import STS_DIR, extract_planned, load_model, materialise, run_snakemake, write_config, write_sts_release
from contextuality.corpus.sts import CorpusError, build_corpus, read_release, write_bundled_pairs
from contextuality.corpus.words import build_word_index, word_table
from contextuality.extraction.alignment import AlignmentError
from workflow_runs import failure, smoke_config

ERROR_CASES = {
    "missing_tab": (
        2014,
        b"a b\tc d\nno tab here\n",
        b"1\n2\n",
        r"STS\.input\.toy\.txt:2: no tab; expected 'sentence1<TAB>sentence2'",
    ),
    "extra_column": (
        2014,
        b"a\tb\tc\n",
        b"1\n",
        r"STS\.input\.toy\.txt:1: 3 tab-separated columns; 2014 release files have 2",
    ),
    "four_columns_outside_2016": (
        2015,
        b"a\tb\tsrc1\tsrc2\n",
        b"1\n",
        r"STS\.input\.toy\.txt:1: 4 tab-separated columns; 2015 release files have 2",
    ),
    "five_columns_in_2016": (
        2016,
        b"a\tb\tsrc1\tsrc2\textra\n",
        b"1\n",
        r"STS2016\.input\.toy\.txt:1: 5 tab-separated columns; 2016 release files have 4",
    ),
    "gold_and_input_lengths_differ": (
        2014,
        b"a\tb\nc\td\n",
        b"1\n",
        r"STS\.input\.toy\.txt: 2 lines but its gold file .*STS\.gs\.toy\.txt has 1",
    ),
    "non_utf8_bytes": (
        2014,
        b"a\tb\ncaf\xe9\td\n",
        b"1\n2\n",
        r"STS\.input\.toy\.txt:2: bytes that are not UTF-8 \(b'\\xe9'\)",
    ),
    "gold_not_a_number": (2014, b"a\tb\n", b"high\n", r"STS\.gs\.toy\.txt:1: gold score 'high' is not a number"),
    # a release file emptied (a failed copy) would silently lose its pairs
    "empty_release_files": (
        2014,
        b"",
        b"",
        r"STS\.input\.toy\.txt: empty release file \(0 lines\); expected one line per sentence pair: restore it from the release$",
    ),
    "empty_gold_file": (2014, b"a\tb\n", b"", r"STS\.gs\.toy\.txt: empty release file \(0 lines\)"),
    "every_pair_unscored": (
        2015,
        b"a\tb\nc\td\n",
        b"\n\n",
        r"STS\.gs\.toy\.txt: no scored pair in its 2 lines \(all blank\); expected gold scores from 0 to 5",
    ),
    "gold_nan": (
        2014,
        b"a\tb\nc\td\n",
        b"1\nnan\n",
        r"STS\.gs\.toy\.txt:2: gold score 'nan' is outside the STS range; allowed: a number from 0 to 5$",
    ),
    "gold_inf": (
        2014,
        b"a\tb\n",
        b"inf\n",
        r"STS\.gs\.toy\.txt:1: gold score 'inf' is outside the STS range; allowed: a number from 0 to 5$",
    ),
    "gold_negative": (2014, b"a\tb\n", b"-7\n", r"STS\.gs\.toy\.txt:1: gold score '-7' is outside the STS range"),
    "gold_above_five": (
        2016,
        b"a\tb\ts\tt\n",
        b"5.01\n",
        r"STS2016\.gs\.toy\.txt:1: gold score '5.01' is outside the STS range",
    ),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_malformed_release_file_is_an_error_naming_file_and_line(tmp_path, case):
    year, input_text, gold_text, message = ERROR_CASES[case]
    with pytest.raises(CorpusError, match=message):
        read_release(write_sts_release(tmp_path, year, input_text, gold_text))


def test_gold_scores_at_the_ends_of_the_range_are_accepted(tmp_path):
    pairs, _ = read_release(write_sts_release(tmp_path, 2014, b"a\tb\nc\td\n", b"0\n5.000\n"))
    assert [pair["score"] for pair in pairs] == [0.0, 5.0]


def test_documented_2016_source_columns_are_accepted_and_ignored(tmp_path):
    pairs, _ = read_release(write_sts_release(tmp_path, 2016, b"a b\tc d\tsource one\tsource two\n", b"3\n"))
    assert (pairs[0]["sentence1"], pairs[0]["sentence2"]) == ("a b", "c d")


def test_malformed_release_file_stops_the_run_before_any_job_with_file_and_line_first(tmp_path):
    """The bundled release files are parsed when the workflow is (0.1 s for all of them): the message is
    Snakemake's error itself, not the last line of a job's traceback."""
    sts = tmp_path / "sts"
    shutil.copytree(STS_DIR / "2014", sts / "2014")
    broken = sts / "2014" / "test" / "STS.input.images.txt"
    lines = broken.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b"\t", b" ")
    broken.write_bytes(b"".join(lines))
    config = smoke_config(corpus={"bundled_dir": str(sts), "years": [2014]})
    result = run_snakemake(tmp_path, "--cores", "1", configfile=write_config(tmp_path / "c.yaml", config))
    output = result.stdout + result.stderr
    assert result.returncode != 0, failure(result)
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists(), output  # no job ran
    assert "Traceback" not in output, output
    lines = output.splitlines()
    error = next(number for number, line in enumerate(lines) if line.startswith("WorkflowError"))
    assert lines[error + 1] == f"{broken}:5: no tab; expected 'sentence1<TAB>sentence2'", output


def test_byte_order_mark_at_the_start_of_a_release_file_is_not_part_of_the_first_word(tmp_path):
    bom = codecs.BOM_UTF8
    pairs, _ = read_release(write_sts_release(tmp_path, 2014, bom + b"The dog runs.\tA cat sleeps.\n", b"3.5\n"))
    assert pairs[0]["sentence1"] == "The dog runs."  # was '\ufeffThe dog runs.'
    first = word_table(pd.DataFrame({"sentence_id": [0], "text": [pairs[0]["sentence1"]]}))
    assert first["word"].tolist()[:2] == ["The", "dog"]
    pairs, _ = read_release(write_sts_release(tmp_path, 2015, b"a\tb\n", bom + b"3.5\n"))  # in a gold file: a number
    assert pairs[0]["score"] == 3.5


# --------------------------------------------------------------------------------------------------
# Odd sentences are kept under their ids, and counted

LONG = " ".join(["extraordinarily"] * 40)
ODD_INPUT = (
    "A dog runs.\tA cat sleeps.\n"  # pair 0: sentences 0, 1
    '""\t?!...\n'  # pair 1: sentence 2 empty (only quotes), 3 only punctuation
    f"{LONG}\tThe dog sleeps.\n"  # pair 2: sentence 4 longer than the model allows
    "\tA hippo is not a dog.\n"  # pair 3: sentence 6 empty
    "The end.\tThe very end.\n"  # pair 4
).encode()
ODD_GOLD = b"1\n2\n3\n4\n5\n"


@pytest.fixture(scope="module")
def odd_corpus(tmp_path_factory):
    """The bundled path (release file -> pairs -> datasets -> sentences -> words) on odd sentences."""
    root = tmp_path_factory.mktemp("odd")
    sts = root / "sts"
    for domain in ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"):
        write_sts_release(
            sts,
            2014,
            ODD_INPUT if domain == "deft-forum" else b"x y\tz w\n",
            ODD_GOLD if domain == "deft-forum" else b"1\n",
            domain=domain,
        )
    logger = logging.getLogger("contextuality")
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        write_bundled_pairs(sts, [2014], False, root / "pairs.jsonl")
        sentences = build_corpus(
            root / "sentences.parquet",
            source="bundled",
            pairs_jsonl=root / "pairs.jsonl",
            years=[2014],
            include_2012_train=False,
            max_sentences=None,
            hub_revisions={},
        )
        build_word_index(
            root / "sentences.parquet",
            root / "words.parquet",
            root / "index.parquet",
            min_occurrences=2,
            count="occurrences",
        )
    finally:
        logger.removeHandler(handler)
    return sentences, root, "\n".join(records)


def test_empty_sentences_are_kept_under_their_id_and_counted_in_the_log(odd_corpus):
    sentences, _, log = odd_corpus
    assert sentences["sentence_id"].tolist() == list(range(len(sentences)))
    assert sentences.loc[sentences["text"] == "", "sentence_id"].tolist() == [2, 6]
    assert "deft-forum             5 lines,     5 scored pairs,    0 unscored skipped, 2 empty sentences kept" in log
    assert "2 empty" in log  # the corpus total


def test_only_punctuation_sentences_are_kept_and_counted_in_the_log(odd_corpus):
    sentences, root, log = odd_corpus
    assert sentences.loc[3, "text"] == "?!..."
    words = pd.read_parquet(root / "words.parquet")
    assert words[words["sentence_id"] == 3]["is_punct"].all()
    assert "1 sentences are only punctuation (kept, with no indexed word)" in log


@pytest.fixture(scope="module")
def tiny_bert(odd_corpus, tmp_path_factory):
    _, root, _ = odd_corpus
    spec = {"source": "random", "architecture": "bert", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 100}
    model_root = tmp_path_factory.mktemp("model")
    record = materialise("tiny", spec, model_root, sentences_parquet=root / "sentences.parquet", seed=1)
    loaded = load_model(record, model_root / "model", spec)
    loaded.max_length = 16  # sentence 4 (40 long words) is far longer
    return loaded


def _extract(loaded, sentences, out, policy, caplog):
    with caplog.at_level(logging.INFO, logger="contextuality"):
        return extract_planned(
            loaded, sentences, word_table(sentences), out, indexing="word", batch_size=2, policy=policy
        )[1]


@pytest.mark.parametrize("policy", ["truncate", "skip"])
def test_over_long_sentences_are_kept_under_their_id_and_counted(odd_corpus, tiny_bert, tmp_path, caplog, policy):
    sentences, _, _ = odd_corpus
    stats = _extract(tiny_bert, sentences, tmp_path, policy, caplog)
    expected = {"truncate": (1, 0), "skip": (0, 1)}[policy]
    assert (stats["truncated"], stats["skipped"]) == expected
    assert f"over-long sentences (max 16 tokens): {expected[0]} truncated, {expected[1]} skipped" in caplog.text
    with h5py.File(tmp_path / "shard.h5") as shard:
        assert shard["sentence_ids"][:].tolist() == sentences["sentence_id"].tolist()  # every id, in order
        offsets = shard["sentence_offsets"][:]
        assert (shard.attrs["n_truncated_sentences"], shard.attrs["n_skipped_sentences"]) == expected
    counts = offsets[1:] - offsets[:-1]
    assert counts[2] == 0 and counts[6] == 0  # empty sentences: no unit, same id
    assert counts[4] == (14 if policy == "truncate" else 0)  # 16 tokens minus [CLS], [SEP]; or none
    units = pd.read_parquet(tmp_path / "units.parquet")
    assert set(units["sentence_id"]) <= set(sentences["sentence_id"])
    assert (
        units.groupby("sentence_id").size().reindex(sentences["sentence_id"], fill_value=0).tolist() == counts.tolist()
    )


def test_over_long_sentence_under_policy_error_names_sentence_and_model(odd_corpus, tiny_bert, tmp_path, caplog):
    sentences, _, _ = odd_corpus
    with pytest.raises(
        AlignmentError,
        match=r"sentence 4 has \d+ tokens, more than model 'tiny' takes \(16\).*allowed policies: truncate, skip, error",
    ):
        _extract(tiny_bert, sentences, tmp_path, "error", caplog)
    assert not (tmp_path / "shard.h5").exists()
