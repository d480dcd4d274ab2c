"""A sense-tagged corpus in the WSD evaluation format (Raganato et al. 2017) as the sense usages' source: the
hand-made tests/data/wsd files read into usages, pairs and the usages' corpus, and each malformed input refused in
one line naming its file and line."""

import re
import shutil

import pandas as pd
import pytest

from conftest import PROJECT, job_counts, run_snakemake, write_config
from contextuality.senses.lexicon.usages import PAIR_COLUMNS, USAGE_COLUMNS, UsageError, write_senses_corpus
from contextuality.senses.lexicon.wsd_corpus import build_wsd_usages, main, read_gold_key, read_wsd_xml
from workflow_runs import smoke_config

DATA = PROJECT / "tests" / "data" / "wsd"
XML, GOLD = DATA / "tiny.data.xml", DATA / "tiny.gold.key.txt"
FORMS = {"bank", "plant", "bright", "deposit", "employ", "shut_down"}


@pytest.fixture(scope="module")
def built(wordnet):
    return build_wsd_usages(wordnet, XML, GOLD, FORMS, max_lemmas=None, seed=0)


def test_instances_become_usages_with_their_gold_synsets(built):
    usages, pairs, sentences = built
    assert list(usages.columns) == USAGE_COLUMNS and list(pairs.columns) == PAIR_COLUMNS
    senses = usages.groupby("lemma")["synset"].value_counts().to_dict()
    assert senses == {
        ("bank", "bank.n.01"): 2,
        ("bank", "depository_financial_institution.n.01"): 2,
        ("plant", "plant.n.01"): 2,  # the power plant's and the one employing workers
        ("plant", "plant.n.02"): 2,  # "needs bright light": the first of its two keys
    }
    # one sense only (deposit, employ, bright), or a multi-word lemma (shut_down): not usages
    assert set(usages["lemma"]) == {"bank", "plant"} and set(usages["pos"]) == {"n"}
    assert (usages["n_senses"] == 2).all()
    assert set(sentences["split"]) == {"wsd_xml"} and len(sentences) == 8
    text = sentences.set_index("sentence_id")["text"]
    for row in usages.itertuples():  # the target is the word at its offset in its sentence
        assert text[row.sentence_id][row.char_start :].startswith(row.form)
    assert "The bank raised its interest rates , sadly ." in set(text)  # the quotation marks removed
    assert len(pairs) == 12 and int(pairs["same_sense"].sum()) == 4


def test_the_usages_step_writes_the_usages_corpus(built, tmp_path):
    usages, pairs, sentences = built
    names = ("usages", "pairs", "sentences", "spacy_words", "word_index")
    write_senses_corpus(usages, pairs, sentences, **{f"{name}_out": tmp_path / f"{name}.parquet" for name in names})
    index = pd.read_parquet(tmp_path / "word_index.parquet")
    assert sorted(index["word"]) == ["bank"] * 4 + ["plant"] * 4
    words = pd.read_parquet(tmp_path / "spacy_words.parquet")
    targets = usages.merge(words, on=["sentence_id", "position"])
    assert (targets["word"] == targets["form"]).all()


def test_the_sentences_are_written_as_a_text_corpus_the_same_as_the_usages_read_them(built, tmp_path):
    main([str(XML), str(tmp_path / "sentences.txt")])
    lines = (tmp_path / "sentences.txt").read_text().splitlines()
    assert len(lines) == 8 and set(built[2]["text"]) == set(lines)


def test_max_lemmas_keeps_a_seeded_subset(wordnet):
    usages, _, _ = build_wsd_usages(wordnet, XML, GOLD, FORMS, max_lemmas=2, seed=0)
    assert usages["lemma"].nunique() == 2
    only_bank, _, _ = build_wsd_usages(wordnet, XML, GOLD, {"bank"}, max_lemmas=None, seed=0)
    assert set(only_bank["lemma"]) == {"bank"}  # only lemmas among the corpus's forms


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


SENTENCE = '<corpus><text id="d0">\n<sentence id="s0">\n<wf lemma="the">The</wf>\n{}\n</sentence>\n</text></corpus>\n'
INSTANCE = '<instance id="s0.t0" lemma="bank" pos="NOUN">bank</instance>'

XML_CASES = {
    "malformed": (SENTENCE.format("<instance id='s0.t0' lemma='bank'>bank</wf>"), 4, "malformed XML (mismatched tag)"),
    "no id": (SENTENCE.format('<instance lemma="bank">bank</instance>'), 4, "<instance> without id"),
    "no word": (SENTENCE.format('<instance id="s0.t0" lemma="bank"> </instance>'), 4, "<instance> without a word"),
    "twice": (SENTENCE.format(INSTANCE + "\n" + INSTANCE), 5, "instance id 's0.t0' given twice (first at line 4)"),
    "outside": ("<corpus><text>\n<wf>The</wf>\n</text></corpus>\n", 2, "<wf> outside a <sentence>"),
}


@pytest.mark.parametrize("case", XML_CASES)
def test_a_malformed_corpus_file_is_one_line_naming_file_and_line(tmp_path, case):
    text, line, message = XML_CASES[case]
    path = _write(tmp_path, "c.xml", text)
    with pytest.raises(UsageError, match=re.escape(f"{path}:{line}: {message}")) as err:
        read_wsd_xml(path)
    assert "\n" not in str(err.value) and "senses.usages.source: wordnet" in str(err.value)


KEY_CASES = {
    "one field": ("s0.t0\n", 1, "'s0.t0' is not 'instance_id sense_key [sense_key ...]'"),
    "not a key": ("\ns0.t0 bank.n.01\n", 2, "'s0.t0 bank.n.01' is not 'instance_id sense_key"),
    "twice": ("s0.t0 bank%1:17:01::\ns0.t0 bank%1:14:00::\n", 2, "instance 's0.t0' given twice (first at line 1)"),
}


@pytest.mark.parametrize("case", KEY_CASES)
def test_a_malformed_key_line_is_one_line_naming_file_and_line(tmp_path, case):
    text, line, message = KEY_CASES[case]
    path = _write(tmp_path, "k.txt", text)
    with pytest.raises(UsageError, match=re.escape(f"{path}:{line}: {message}")):
        read_gold_key(path)


JOIN_CASES = {
    "instance without a key": ("", "c.xml", 4, "instance 's0.t0' has no sense key in"),
    "key without an instance": (
        "s0.t0 bank%1:17:01::\ns0.t9 bank%1:17:01::\n",
        "k.txt",
        2,
        "instance 's0.t9' is not in",
    ),
    "key not in WordNet 3.0": (
        "s0.t0 bank%1:17:01:: bank%1:99:00::\n",
        "k.txt",
        1,
        "sense key 'bank%1:99:00::' is not",
    ),
}


@pytest.mark.parametrize("case", JOIN_CASES)
def test_keys_and_instances_that_do_not_match_are_one_line_naming_file_and_line(wordnet, tmp_path, case):
    keys, where, line, message = JOIN_CASES[case]
    xml, gold = _write(tmp_path, "c.xml", SENTENCE.format(INSTANCE)), _write(tmp_path, "k.txt", keys)
    with pytest.raises(UsageError, match=re.escape(f"{tmp_path / where}:{line}: {message}")) as err:
        build_wsd_usages(wordnet, xml, gold, {"bank"}, max_lemmas=None, seed=0)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_the_smoke_config_measures_senses_on_a_wsd_corpus(smoke_run, tmp_path):
    """The smoke run with senses.usages switched to tests/data/wsd/smoke.*: lemmas among the smoke corpus's forms
    (city, year, hospital), through sense_usages and tiny-gpt2's sense stage (word-indexed: each usage one unit).
    Only the usages' side runs again: the STS corpus's extraction and WordNet's files are the smoke run's."""
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    config = smoke_config()
    config["senses"]["usages"] = {
        "source": "wsd_xml",
        "xml": str(DATA / "smoke.data.xml"),
        "gold_key": str(DATA / "smoke.gold.key.txt"),
    }
    target = "results/metrics/sts/tiny-gpt2/senses/layers.csv"
    result = run_snakemake(workdir, target, "--cores", "2", configfile=write_config(tmp_path / "c.yaml", config))
    assert result.returncode == 0, result.stderr[-3000:]
    ran = set(job_counts(result.stdout + result.stderr)) - {"total"}
    assert ran == {"sense_usages", "plan", "extract", "manifest", "layer_file", "measure_senses"}, ran
    usages = pd.read_parquet(workdir / "results/senses/usages.parquet")
    assert usages.groupby("lemma")["synset"].nunique().to_dict() == {"city": 3, "hospital": 2, "year": 3}
    sentences = pd.read_parquet(workdir / "results/corpora/usages/sentences.parquet")
    assert set(sentences["split"]) == {"wsd_xml"} and len(sentences) == 12
    layers = pd.read_csv(workdir / target)
    auroc = layers[(layers["measure"] == "auroc_same_sense") & (layers["preprocessing"] == "centred")]
    assert (auroc["n"] == 21).all() and auroc.loc[auroc["layer"] > 0, "value"].notna().all()
