"""WN-usages: which examples count, the pairs, the second corpus's files and their check."""

from dataclasses import dataclass

import pandas as pd
import pytest

from contextuality.corpus.words import word_table
from contextuality.senses.lexicon.usages import (
    PAIR_COLUMNS,
    USAGE_COLUMNS,
    UsageError,
    build_usages,
    check_targets,
    synsets_with_lemmas,
    write_senses_corpus,
)


@dataclass
class Lemma:
    text: str

    def name(self):
        return self.text


@dataclass(frozen=True)
class Synset:
    id: str
    lemma_names: tuple
    example_texts: tuple
    lex: str

    def name(self):
        return self.id

    def pos(self):
        return self.id.split(".")[1]

    def lexname(self):
        return self.lex

    def lemmas(self):
        return [Lemma(name) for name in self.lemma_names]

    def examples(self):
        return list(self.example_texts)


class StubWordNet:
    """Four synsets of bank (two nouns, one verb) and one of river: enough for every rule of the usages."""

    SYNSETS = [
        Synset(
            "bank.n.01",
            ("bank",),
            ("they pulled the canoe up on the bank", "he sat on the banks of the river"),
            "noun.object",
        ),
        Synset(
            "depository.n.01",
            ("depository", "bank"),
            ("he cashed a check at the bank", "the bank is closed"),
            "noun.group",
        ),
        Synset("bank.n.03", ("bank",), ("a long bank of clouds",), "noun.group"),
        Synset("bank.v.01", ("bank",), ('"bank a fire"', "no lemma in this one"), "verb.contact"),
        Synset("trust.v.01", ("trust", "bank"), ("you can bank on me",), "verb.cognition"),
        Synset("river.n.01", ("river", "river_bank"), ("the river flooded",), "noun.object"),
    ]

    def synsets(self, word):
        """As NLTK's: the synsets with a lemma that is the word or one of its bases, any POS."""
        bases = {base for pos in "nvar" for base in self._morphy(word.lower(), pos)}
        return [synset for synset in self.SYNSETS if bases & {name.lower() for name in synset.lemma_names}]

    def _morphy(self, word, pos):
        return {"banks": ["banks", "bank"]}.get(word, [word])


@pytest.fixture
def built():
    return build_usages(StubWordNet(), {"bank", "river"}, max_lemmas=None, seed=0)


def test_usages(built):
    usages, pairs, sentences = built
    assert list(usages.columns) == USAGE_COLUMNS and list(pairs.columns) == PAIR_COLUMNS
    assert set(usages["lemma"]) == {"bank"}  # river has one sense only; river_bank is not single-word
    assert len(usages) == 7 and list(usages.groupby("pos")["n_senses"].first()) == [3, 2]
    banks = usages[usages["form"] == "banks"].iloc[0]  # found through morphy
    assert (banks["synset"], banks["position"], banks["char_start"]) == ("bank.n.01", 4, 14)
    fire = usages[usages["synset"] == "bank.v.01"].iloc[0]
    assert fire["position"] == 0 and sentences.loc[fire["sentence_id"], "text"] == "bank a fire"  # quotes removed
    assert list(usages["usage_id"]) == list(range(len(usages)))
    assert sentences["text"].is_unique and list(sentences["sentence_id"]) == list(range(len(sentences)))
    assert set(sentences["split"]) == {"wordnet"} and (sentences["year"] == 0).all() and sentences["score"].isna().all()


def test_pairs(built):
    usages, pairs, _ = built
    # same (lemma, POS) and lower-cased form: the four noun usages of "bank" -> 6 pairs, the two verb ones -> 1
    assert len(pairs) == 7 and (pairs["usage_a"] < pairs["usage_b"]).all()
    synset = usages.set_index("usage_id")["synset"]
    assert (
        pairs["same_sense"] == (synset.loc[pairs["usage_a"]].to_numpy() == synset.loc[pairs["usage_b"]].to_numpy())
    ).all()
    assert pairs["same_sense"].sum() == 1 and pairs["same_lexname"].sum() == 3


def test_max_lemmas_is_seeded():
    wordnet = StubWordNet()
    wordnet.SYNSETS = wordnet.SYNSETS + [Synset("river.n.02", ("river",), ("a river of words",), "noun.quantity")]
    first = build_usages(wordnet, {"bank", "river"}, max_lemmas=1, seed=3)[0]
    again = build_usages(wordnet, {"bank", "river"}, max_lemmas=1, seed=3)[0]
    assert first["lemma"].nunique() == 1
    pd.testing.assert_frame_equal(first, again)


def test_written_corpus(built, tmp_path):
    usages, pairs, sentences = built
    outs = {
        name: tmp_path / f"{name}.parquet" for name in ("usages", "pairs", "sentences", "spacy_words", "word_index")
    }
    write_senses_corpus(usages, pairs, sentences, **{f"{name}_out": path for name, path in outs.items()})
    words = pd.read_parquet(outs["spacy_words"])
    pd.testing.assert_frame_equal(words, word_table(pd.read_parquet(outs["sentences"])))
    index = pd.read_parquet(outs["word_index"])
    assert list(index.columns) == ["word", "sentence_id", "position"] and sorted(index["word"]) == sorted(
        usages["form"]
    )


def test_wrong_target_refused(built):
    usages, _, sentences = built
    moved = usages.assign(position=usages["position"] + 1)
    with pytest.raises(UsageError, match="not the usage's form"):
        check_targets(moved, word_table(sentences))


@pytest.mark.slow
def test_real_wordnet_bank(wordnet):
    usages, pairs, sentences = build_usages(wordnet, {"bank", "plant"}, max_lemmas=None, seed=0)
    assert {("bank", "n"), ("bank", "v"), ("plant", "n"), ("plant", "v")} >= set(zip(usages["lemma"], usages["pos"]))
    words = word_table(sentences)
    check_targets(usages, words)
    assert (usages["n_senses"] >= 2).all() and len(pairs) > 0


@pytest.mark.slow
def test_the_lemma_index_finds_the_synsets_a_scan_of_all_of_them_finds(wordnet):
    """synsets_with_lemmas against brute force: every synset of WordNet 3.0 read. Capitalised lemmas (China,
    March) count, as do lemmas that are also another word's inflection (left); an inflection alone (ran) does not."""
    forms = {"bank", "plant", "china", "march", "left", "ran", "banks", "well", "better", "set", "the"}
    scanned = [s for s in wordnet.all_synsets() if any(lemma.name().lower() in forms for lemma in s.lemmas())]
    found = synsets_with_lemmas(wordnet, forms)
    assert found == sorted(scanned, key=lambda synset: synset.name()) and len(found) > 100
    assert {"china.n.01", "march.n.01"} <= {synset.name() for synset in found}


@pytest.mark.parametrize("forms, found", [
    ({"und", "der", "die"}, r"knows 3 of the corpus's indexed word forms and has example sentences in two or more "
                            r"senses for 0 lemma\(s\) of them, giving 0"),
    ({"bank", "river"}, r"knows 2 of the corpus's indexed word forms and has example sentences in two or more senses "
                        r"for 1 lemma\(s\) of them, giving 1"),
])  # fmt: skip
def test_a_corpus_without_enough_wordnet_usages_stops_at_sense_usages_naming_the_way_out(forms, found):
    """A corpus WordNet cannot read (another language, jargon) failed at the senses' plan, after extraction,
    blaming max_length and min_occurrences; the main tables were never made."""
    from contextuality.senses.lexicon.usages import check_enough_usages

    usages, _, _ = build_usages(StubWordNet(), forms, max_lemmas=None, seed=0)
    with pytest.raises(UsageError, match=rf"sense usages: WordNet 3.0 {found} word form\(s\) with 2 usages or more, "
                                         rf"but the sense measures need at least 2 .*set senses.enabled: false"):  # fmt: skip
        check_enough_usages(usages, len(forms))
    wordnet = StubWordNet()
    wordnet.SYNSETS = wordnet.SYNSETS + [Synset("river.n.02", ("river",), ("a river of words", "rivers of words"), "x")]
    usages, _, _ = build_usages(wordnet, {"bank", "river"}, max_lemmas=None, seed=0)
    check_enough_usages(usages, 2)  # bank and river, each with two usages or more
