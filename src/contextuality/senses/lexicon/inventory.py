"""The sense inventory of the corpus's words: WordNet 3.0 synsets and SemCor counts per lower-cased form.

There is no POS tagger here: every form is looked up under all four parts of speech with WordNet's own
lemmatiser (morphy, through NLTK's ``synsets``), and the form's POS is the one whose synsets carry
the most SemCor tags. Morphy's reach is kept as it is: ``lay`` also gets the synsets of ``lie``, and
``wound`` those of ``wind`` (spec pitfall 4).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

POS_ORDER = ("n", "v", "a", "r")  # the last tie-break of the chosen POS
COLUMNS = [
    "form",
    "n",
    "lemma",
    "pos",
    "n_synsets",
    "n_synsets_pos",
    "n_tagged_senses",
    "n_lexnames",
    "semcor_entropy",
    "polysemy",
]


def semcor_counts(wordnet) -> dict[str, int]:
    """SemCor tag count of every sense key (``index.sense``'s 4th column), read in one pass.

    The same numbers as NLTK's ``Lemma.count()``, without a binary search of the file per lemma.
    """
    counts = {}
    with wordnet.open("index.sense") as handle:
        for line in handle:
            key, _offset, _number, count = line.split()
            counts[key] = int(count)
    return counts


def pos_of(synset) -> str:
    """n, v, a or r: adjective satellites (s) count as adjectives."""
    pos = synset.pos()
    return "a" if pos == "s" else pos


def synset_count(synset, bases: set[str], counts: dict[str, int]) -> int:
    """SemCor tags of the synset's lemmas whose name is one of the form's morphy bases."""
    return sum(counts.get(lemma.key(), 0) for lemma in synset.lemmas() if lemma.name().lower() in bases)


def form_senses(form: str, wordnet, counts: dict[str, int]) -> list[dict]:
    """One row per (POS, synset) of a lower-cased form: pos, lemma (morphy base), lexname, SemCor count."""
    rows = []
    for pos in POS_ORDER:
        bases = wordnet._morphy(form, pos)  # every base morphy gives; synsets(form, pos) uses the same
        if not bases:
            continue
        base_set = {base.lower() for base in bases}
        found = [(synset, synset_count(synset, base_set, counts)) for synset in wordnet.synsets(form, pos)]
        # the base named: the one with the most SemCor tags, then synsets (morphy lists "banks" before "bank")
        weight = {
            base: (
                sum(count for synset, count in found if base in synset_names(synset)),
                sum(base in synset_names(synset) for synset, _ in found),
            )
            for base in bases
        }
        lemma = max(bases, key=lambda base: weight[base])  # max keeps the first of equals: morphy's order
        rows += [
            {
                "form": form,
                "pos": pos,
                "lemma": lemma,
                "synset": synset.name(),
                "lexname": synset.lexname(),
                "count": count,
            }
            for synset, count in found
        ]
    return rows


def synset_names(synset) -> set[str]:
    return {lemma.name().lower() for lemma in synset.lemmas()}


def sense_inventory(word_index: pd.DataFrame, wordnet) -> pd.DataFrame:
    """One row per lower-cased word form of the word index that has a WordNet entry (columns ``COLUMNS``).

    ``n`` counts the form's occurrences in all casings; ``pos`` is the POS whose synsets of the form carry
    the largest SemCor count in total (ties: more synsets, then n < v < a < r); ``semcor_entropy`` is in
    bits over the chosen POS's synsets (0 when none is tagged). Forms with no synset are left out.
    """
    n_of = word_index["word"].str.lower().value_counts()
    counts = semcor_counts(wordnet)
    rows = [row for form in sorted(n_of.index) for row in form_senses(form, wordnet, counts)]
    senses = pd.DataFrame(rows, columns=["form", "pos", "lemma", "synset", "lexname", "count"])
    log.info(
        "%d of %d lower-cased forms have no WordNet synset (left out)", len(n_of) - senses["form"].nunique(), len(n_of)
    )
    if senses.empty:
        return pd.DataFrame({column: [] for column in COLUMNS})

    by_pos = (
        senses.groupby(["form", "pos"], sort=False)
        .agg(
            total=("count", "sum"),
            n_synsets_pos=("synset", "size"),
            n_tagged_senses=("count", lambda c: int((c > 0).sum())),
            lemma=("lemma", "first"),
        )
        .reset_index()
    )
    by_pos["order"] = by_pos["pos"].map({pos: i for i, pos in enumerate(POS_ORDER)})
    chosen = by_pos.sort_values(
        ["form", "total", "n_synsets_pos", "order"], ascending=[True, False, False, True]
    ).drop_duplicates("form")

    # entropy of the SemCor counts over the chosen POS's synsets
    tagged = senses.merge(chosen[["form", "pos", "total"]], on=["form", "pos"])
    tagged = tagged[tagged["count"] > 0]
    p = tagged["count"].to_numpy(np.float64) / tagged["total"].to_numpy(np.float64)
    entropy = pd.Series(-p * np.log2(p), index=tagged.index).groupby(tagged["form"]).sum()

    # over all POS: synsets as NLTK's synsets(form) gives them (a synset reached from two POS counts once)
    all_pos = (
        senses.drop_duplicates(["form", "synset"])
        .groupby("form")
        .agg(n_synsets=("synset", "size"), n_lexnames=("lexname", "nunique"))
    )
    table = chosen.set_index("form").join(all_pos)
    table["n"] = n_of.reindex(table.index).astype("int64")
    table["semcor_entropy"] = entropy.reindex(table.index).fillna(0.0).astype("float64")
    table["polysemy"] = np.where(table["n_synsets"] == 1, "mono", "poly")
    table = table.reset_index()[COLUMNS]
    return (
        table.astype(
            {"n_synsets": "int64", "n_synsets_pos": "int64", "n_tagged_senses": "int64", "n_lexnames": "int64"}
        )
        .sort_values("form", kind="stable")
        .reset_index(drop=True)
    )
