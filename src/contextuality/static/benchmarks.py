"""The word benchmarks of Table 1 as the paper's fork of ``word-embeddings-benchmarks`` read them.

One loader per task, each reading the bundled files under ``resources/benchmarks`` into a table of
word pairs and scores, analogy questions, SemEval-2012 task 2 ratings or categories. Words are
lower-cased (the embeddings are); MEN defaults to what the fork's ``fetch_MEN(form="natural")``
really returned: the lemma-form file with its ``-n/-v/-j`` suffixes cut off; SemEval gold ratings are
parsed as floats and its prototype pairs come from the official ``Phase1Questions`` files.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from contextuality.static import benchmark_files as files


def _read_table(path: Path, **kwargs) -> pd.DataFrame:
    """Read a benchmark table keeping every string as is (no NaN for words like 'null')."""
    return pd.read_csv(path, keep_default_na=False, na_filter=False, **kwargs)


def _pairs(word1: Iterable[str], word2: Iterable[str], score: Iterable) -> pd.DataFrame:
    """Similarity pairs: lower-cased words and a float score."""
    return pd.DataFrame(
        {
            "word1": [str(w).strip().lower() for w in word1],
            "word2": [str(w).strip().lower() for w in word2],
            "score": np.asarray(list(score), dtype=float),
        }
    )


def _tsv3(path: Path) -> pd.DataFrame:
    """``word1<TAB>word2<TAB>score`` without header."""
    df = _read_table(path, sep="\t", header=None, quoting=csv.QUOTE_NONE, names=["w1", "w2", "s"])
    return _pairs(df["w1"], df["w2"], df["s"])


def load_simlex999(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """SimLex-999 (999 pairs), original release, column ``SimLex999``."""
    df = _read_table(Path(benchmark_root) / files.SIMLEX999, sep="\t", quoting=csv.QUOTE_NONE)
    return _pairs(df["word1"], df["word2"], df["SimLex999"])


def load_men(benchmark_root: str | os.PathLike, form: Literal["lemma", "natural"] = "lemma") -> pd.DataFrame:
    """MEN, all 3000 pairs.

    ``lemma`` (default): the lemma-form file with the POS suffix cut off, which is what the fork's
    ``fetch_MEN(which="all", form="natural")`` returns. ``natural``: the release's natural-form file.
    """
    df = _read_table(Path(benchmark_root) / files.MEN[form], sep=" ")
    if form == "lemma":
        strip = re.compile(r"-[a-z]$")
        return _pairs((strip.sub("", w) for w in df["word1"]), (strip.sub("", w) for w in df["word2"]), df["score"])
    return _pairs(df["word1"], df["word2"], df["score"])


def load_ws353(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """WordSim-353, all 353 pairs (``combined.csv``)."""
    df = _read_table(Path(benchmark_root) / files.WS353)
    return _pairs(df["Word 1"], df["Word 2"], df["Human (mean)"])


def _file_loader(read: Callable[[Path], pd.DataFrame], name: str, doc: str) -> Callable[..., pd.DataFrame]:
    """A loader of one bundled file ``name`` (a path in benchmark_files) read by ``read``."""

    def load(benchmark_root: str | os.PathLike) -> pd.DataFrame:
        return read(Path(benchmark_root) / name)

    load.__doc__ = doc
    return load


# The word-pair files without a header (word1, word2, score)
load_rw = _file_loader(_tsv3, files.RW, "Stanford Rare Words, 2034 pairs (mean scores).")
load_rg65 = _file_loader(_tsv3, files.RG65, "RG-65, 65 pairs.")
load_mturk287 = _file_loader(_tsv3, files.MTURK287, "MTurk-287 (the fork's ``MTurk``), 287 pairs.")
load_ws353_relatedness = _file_loader(
    _tsv3, files.WS353_RELATEDNESS, "WS353 relatedness split (Agirre et al. 2009), 252 pairs."
)
load_ws353_similarity = _file_loader(
    _tsv3, files.WS353_SIMILARITY, "WS353 similarity split (Agirre et al. 2009), 203 pairs."
)


def load_google(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """Google analogies ``a:b :: c:d`` (19,544), lower-cased; section lines give ``category``."""
    rows, category = [], None
    with open(Path(benchmark_root) / files.GOOGLE, encoding="utf-8") as fh:
        for line in fh:
            tokens = line.split()
            if not tokens:
                continue
            if tokens[0] == ":":
                category = tokens[1].lower()
            elif len(tokens) == 4:
                rows.append([t.lower() for t in tokens] + [category])
            else:
                raise ValueError(f"unexpected line in questions-words.txt: {line!r}")
    return pd.DataFrame(rows, columns=["a", "b", "c", "d", "category"])


def load_msr(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """MSR syntactic analogies (8,000), lower-cased; ``category`` is the POS relation type."""
    df = _read_table(Path(benchmark_root) / files.MSR, index_col=0)
    out = pd.DataFrame(
        {k: df[c].str.strip().str.lower() for k, c in zip("abcd", ("word1", "word2", "word3", "target"))}
    )
    out["category"] = df["type"].to_numpy()
    return out.reset_index(drop=True)


@dataclass(frozen=True)
class SemEval2012:
    """SemEval-2012 Task 2: prototype (paradigm) pairs and gold-rated pairs per subcategory."""

    prototypes: dict[str, list[tuple[str, str]]]
    pairs: pd.DataFrame  # category, split, word1, word2, score


_SEMEVAL_RATING = re.compile(r'^\s*(-?\d+(?:\.\d+)?)\s+"([^"]+):([^"]+)"\s*$')
_SEMEVAL_PAIR = re.compile(r"([^\s:,.]+)\s*:\s*([^\s:,.]+)")


def load_semeval2012_2(
    benchmark_root: str | os.PathLike, which: Literal["all", "train", "test"] = "all"
) -> SemEval2012:
    """SemEval-2012 Task 2 with the gold ("golden") ratings: 79 subcategories for ``all``.

    Prototypes are the pairs the Phase 1 question shows (``Phase1Questions-<c>.txt``; some are
    written ``a:b. c:d`` or ``a: b``, which the fork's parser also splits); rated pairs and
    scores come from ``GoldRatings-<c>.txt``.
    """
    prototypes, rows = {}, []
    for cat, split, gold, question_file in files.semeval_files(benchmark_root, which):
        question = question_file.read_text("utf-8")
        shown = question.split("Consider the following word pairs:")[1].split("What relation")[0]
        prototypes[cat] = [(x.lower(), y.lower()) for x, y in _SEMEVAL_PAIR.findall(shown)]
        for line in gold.read_text("utf-8").splitlines():
            if line.startswith("#") or not line.strip():
                continue
            m = _SEMEVAL_RATING.match(line)
            if m is None:
                raise ValueError(f"{gold}: cannot parse {line!r}")
            rows.append((cat, split.lower(), m[2].strip().lower(), m[3].strip().lower(), float(m[1])))
    pairs = pd.DataFrame(rows, columns=["category", "split", "word1", "word2", "score"])
    return SemEval2012(prototypes=prototypes, pairs=pairs)


def _categories(path: Path) -> pd.DataFrame:
    """``,category,word`` CSV; rows with an empty word (category separators) are skipped."""
    df = _read_table(path, index_col=0)
    df = df[df["word"].str.strip() != ""]
    return pd.DataFrame({"word": df["word"].str.strip().str.lower().to_numpy(), "category": df["category"].to_numpy()})


# The category files (,category,word)
load_bless = _file_loader(_categories, files.BLESS, "BLESS categorization: 200 words in 17 categories.")
load_ap = _file_loader(_categories, files.AP, "Almuhareb-Poesio: 402 words in 21 categories.")
load_battig = _file_loader(_categories, files.BATTIG, "Battig: 5,231 (word, category) rows in 56 categories.")
load_essli_2c = _file_loader(
    _categories, files.ESSLI_2C, "ESSLLI-2008 verb categorization (the fork's ``ESSLI_2c``): 45 verbs in 9 classes."
)
