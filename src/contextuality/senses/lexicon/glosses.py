"""WordNet 3.0's definitions and example sentences as a corpus table: a second real corpus for any-corpus runs.

One row per definition (117,659, one per synset) and per example sentence (48,339), in WordNet's synset
order (``all_synsets``: adjectives with their satellites, adverbs, nouns, verbs, by file offset): ``id``
(``synset.def`` or ``synset.exN``), ``kind`` (definition or example) and ``text``, read with nltk from the files the
``wordnet`` rule fetched and checked (``senses.lexicon.wordnet.load_wordnet`` checks each file's sha256 again).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.senses.lexicon.wordnet import load_wordnet

log = logging.getLogger(__name__)


def glosses(root: Path) -> pd.DataFrame:
    """The table of ``root``'s WordNet (``load_wordnet``): id, kind and text per definition and example."""
    reader = load_wordnet(root)
    rows = []
    for synset in reader.all_synsets():
        name = synset.name()
        rows.append((f"{name}.def", "definition", synset.definition()))
        rows += [(f"{name}.ex{n}", "example", text) for n, text in enumerate(synset.examples(), start=1)]
    return pd.DataFrame(rows, columns=["id", "kind", "text"])


def write_glosses(root: Path, out: Path) -> pd.DataFrame:
    table = glosses(root)
    counts = table["kind"].value_counts()
    log.info(
        "WordNet 3.0: %d definitions and %d example sentences", counts.get("definition", 0), counts.get("example", 0)
    )
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    return table
