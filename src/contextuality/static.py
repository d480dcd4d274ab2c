"""Static word embeddings and the nine word benchmarks of Table 1 (paper spec §5, §6.5).

A static embedding (a layer's first-principal-component file, or a GloVe/FastText baseline)
is read from word2vec/GloVe text, trimmed to a shared lower-cased vocabulary, lower-cased and
L2-normalised, then scored with the protocol of the kudkudak ``word-embeddings-benchmarks``
fork the paper used (``evaluate_on_all``):

* similarity (SimLex999, MEN, WS353, RW; extras RG65, MTurk, WS353R, WS353S): Spearman rho
  between cosine similarity and the human score; words outside the vocabulary get the mean
  vector of the embedding;
* analogy (Google, MSR): 3CosAdd accuracy over all questions, the three question words
  excluded, candidates = the trimmed vocabulary;
* SemEval2012_2: per subcategory, Spearman rho between (prototype difference) . (pair
  difference) and the gold rating, averaged over all 79 subcategories (train + test);
* categorization (BLESS, AP; extras Battig, ESSLI_2c): best cluster purity over agglomerative
  clustering (ward, and average/complete linkage x cosine/euclidean) and KMeans.

Deliberate, documented choices where the fork is ambiguous or buggy:

* benchmark words are lower-cased (the embedding is), so ``Jerusalem`` in WS353 is looked up
  as ``jerusalem``; the fork looked up the cased string and gave it the mean vector;
* SemEval gold ratings are parsed as floats (the fork's original code ranked them as strings);
  prototype pairs come from the official ``Phase1Questions`` files;
* MEN defaults to what the fork's ``fetch_MEN(form="natural")`` really returns: the
  lemma-form file with the ``-n/-v/-j`` suffixes cut off (``form="natural"`` reads the
  release's natural-form file instead; 821 of its 3000 pairs are inflected differently);
* KMeans and the item order are seeded (the fork set no seed).
"""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Literal, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from scipy.stats import ConstantInputWarning, spearmanr
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.metrics.cluster import contingency_matrix
from threadpoolctl import threadpool_limits

from contextuality.atomic import atomic_path

TABLE1_TASKS = ("SimLex999", "MEN", "WS353", "RW", "Google", "MSR", "SemEval2012_2", "BLESS", "AP")
EXTRA_TASKS = ("RG65", "MTurk", "WS353R", "WS353S", "Battig", "ESSLI_2c")

# Column headers of the paper's Table 1.
TASK_DISPLAY = {task: task for task in TABLE1_TASKS + EXTRA_TASKS} | {"SemEval2012_2": "SemEval2012(2)"}

# The paper's Table 1 (spec §6.5): method label -> task -> value.
PAPER_TABLE1: dict[str, dict[str, float]] = {
    label: dict(zip(TABLE1_TASKS, values))
    for label, values in {
        "GloVe": (0.194, 0.216, 0.339, 0.127, 0.189, 0.312, 0.097, 0.390, 0.308),
        "FastText": (0.239, 0.239, 0.432, 0.176, 0.203, 0.289, 0.104, 0.375, 0.291),
        "ELMo, Layer 1": (0.276, 0.167, 0.317, 0.148, 0.170, 0.326, 0.114, 0.410, 0.308),
        "ELMo, Layer 2": (0.215, 0.151, 0.272, 0.133, 0.130, 0.268, 0.132, 0.395, 0.318),
        "BERT, Layer 1": (0.315, 0.200, 0.394, 0.208, 0.236, 0.389, 0.166, 0.365, 0.321),
        "BERT, Layer 2": (0.320, 0.166, 0.383, 0.188, 0.230, 0.385, 0.149, 0.365, 0.321),
        "BERT, Layer 11": (0.221, 0.076, 0.319, 0.135, 0.175, 0.290, 0.149, 0.370, 0.289),
        "BERT, Layer 12": (0.233, 0.082, 0.325, 0.144, 0.184, 0.307, 0.144, 0.360, 0.294),
        "GPT-2, Layer 1": (0.174, 0.012, 0.176, 0.183, 0.052, 0.081, 0.033, 0.220, 0.184),
        "GPT-2, Layer 2": (0.135, 0.036, 0.171, 0.180, 0.045, 0.062, 0.021, 0.245, 0.184),
        "GPT-2, Layer 11": (0.126, 0.034, 0.165, 0.182, 0.031, 0.038, 0.045, 0.270, 0.189),
        "GPT-2, Layer 12": (0.140, -0.009, 0.113, 0.163, 0.020, 0.021, 0.014, 0.225, 0.172),
    }.items()
}

# The author's released word_embeddings_benchmark/results.csv row equal to "BERT, Layer 11"
# (spec §6.5): an anchor that also covers the extra tasks. ESSLI_1a/2b and TR9856 are not staged.
PAPER_RESULTS_CSV_BERT_L11: dict[str, float] = {
    "AP": 0.2886, "BLESS": 0.37, "MEN": 0.0759, "RW": 0.1354, "SimLex999": 0.2213, "WS353": 0.3190,
    "Google": 0.1749, "MSR": 0.2898, "SemEval2012_2": 0.1494, "Battig": 0.143, "ESSLI_2c": 0.600,
    "MTurk": 0.062, "RG65": 0.094, "WS353R": 0.195, "WS353S": 0.324,
}


# --------------------------------------------------------------------------- embeddings

@dataclass(frozen=True, eq=False)
class StaticEmbedding:
    """Lower-cased words and their unit-norm vectors (row i belongs to ``words[i]``)."""

    words: list[str]
    vectors: np.ndarray
    index: dict[str, int]

    @classmethod
    def from_arrays(cls, words: Sequence[str], vectors: np.ndarray,
                    vocabulary: Iterable[str] | None = None) -> StaticEmbedding:
        """Apply the same trimming, lower-casing, collision rule and normalisation as the file reader."""
        vectors = np.asarray(vectors)
        chosen: dict[str, tuple[str, int]] = {}
        vocab = None if vocabulary is None else {w.lower() for w in vocabulary}
        for i, word in enumerate(words):
            _choose(chosen, word, i, vocab)
        return cls._build(list(chosen), vectors[[i for _, i in chosen.values()]])

    @classmethod
    def _build(cls, words: list[str], matrix: np.ndarray) -> StaticEmbedding:
        """L2-normalise the rows (zero rows stay zero) and index the words."""
        matrix = np.asarray(matrix, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        return cls(words=words, vectors=matrix, index={w: i for i, w in enumerate(words)})

    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        return int(self.vectors.shape[1])

    @cached_property
    def mean_vector(self) -> np.ndarray:
        """Mean of the (normalised) vectors: the stand-in for out-of-vocabulary words."""
        if not len(self.words):
            raise ValueError("empty embedding: no word of the file is in the vocabulary")
        return self.vectors.mean(axis=0)

    def ids(self, words: Iterable[str]) -> np.ndarray:
        """Row of each word, -1 where it is out of vocabulary."""
        return np.fromiter((self.index.get(w, -1) for w in words), dtype=np.int64)

    def lookup(self, words: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of ``words`` (mean vector where unknown) and the in-vocabulary mask."""
        ids = self.ids(words)
        known = ids >= 0
        out = np.empty((len(ids), self.dim), dtype=self.vectors.dtype)
        out[known] = self.vectors[ids[known]]
        out[~known] = self.mean_vector
        return out, known


def _choose(chosen: dict[str, tuple[str, object]], word: str, payload: object, vocab: set[str] | None) -> None:
    """Keep ``payload`` under the lower-cased ``word`` if that key is in ``vocab``.

    Collision rule of the fork's ``load_embedding(lower=True)``: an original that already is
    lower-case wins, otherwise the first one seen stays.
    """
    key = word.lower()
    if vocab is not None and key not in vocab:
        return
    if key in chosen and (chosen[key][0] == key or word != key):
        return
    chosen[key] = (word, payload)


def _is_header(tokens: list[str]) -> bool:
    """A word2vec header line is ``<n_words> <dim>``."""
    return len(tokens) == 2 and all(t.isdigit() for t in tokens)


def load_embedding_text(path: str | os.PathLike, vocabulary: Iterable[str] | None = None) -> StaticEmbedding:
    """Read word2vec/GloVe text (header line optional), trimmed to ``vocabulary`` (spec §5.2).

    The file is streamed and only lines whose lower-cased word is in the vocabulary are parsed,
    so a multi-GB GloVe file needs little memory. Words may contain spaces (the vector is the
    last ``dim`` fields). Vectors are L2-normalised.
    """
    vocab = None if vocabulary is None else {w.lower() for w in vocabulary}
    chosen: dict[str, tuple[str, list[str]]] = {}
    dim = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip()
            if not line:
                continue
            if dim is None:
                tokens = line.split(" ")
                if lineno == 1 and _is_header(tokens):
                    dim = int(tokens[1])
                    continue
                dim = len(tokens) - 1
            if vocab is not None and line.split(" ", 1)[0].lower() not in vocab:
                continue
            parts = line.rsplit(" ", dim)
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{lineno}: expected a word and {dim} values")
            _choose(chosen, parts[0], parts[1:], vocab)
    if not chosen:
        return StaticEmbedding._build([], np.zeros((0, dim or 0), np.float32))
    matrix = np.array([values for _, values in chosen.values()], dtype=np.float32)
    return StaticEmbedding._build(list(chosen), matrix)


def write_embedding_text(path: str | os.PathLike, words: Sequence[str], matrix: np.ndarray) -> Path:
    """Write ``word v1 ... vd`` lines, no header (data contract), atomically (temp name + rename).

    Values are written with 9 significant digits, which round-trips float32 exactly.
    """
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(f"need one row per word: {len(words)} words, matrix of shape {matrix.shape}")
    for word in words:
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"word {word!r} is empty or contains whitespace")
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for word, row in zip(words, matrix.tolist()):
            fh.write(word + " " + " ".join(f"{x:.9g}" for x in row) + "\n")
    return path


# --------------------------------------------------------------------------- benchmark files

def _read_table(path: Path, **kwargs) -> pd.DataFrame:
    """Read a benchmark table keeping every string as is (no NaN for words like 'null')."""
    return pd.read_csv(path, keep_default_na=False, na_filter=False, **kwargs)


def _pairs(word1: Iterable[str], word2: Iterable[str], score: Iterable) -> pd.DataFrame:
    """Similarity pairs: lower-cased words and a float score."""
    return pd.DataFrame({
        "word1": [str(w).strip().lower() for w in word1],
        "word2": [str(w).strip().lower() for w in word2],
        "score": np.asarray(list(score), dtype=float),
    })


def _tsv3(path: Path) -> pd.DataFrame:
    """``word1<TAB>word2<TAB>score`` without header."""
    df = _read_table(path, sep="\t", header=None, quoting=csv.QUOTE_NONE, names=["w1", "w2", "s"])
    return _pairs(df["w1"], df["w2"], df["s"])


def load_simlex999(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """SimLex-999 (999 pairs), original release, column ``SimLex999``."""
    df = _read_table(Path(benchmark_root) / "wordsim/simlex999/SimLex-999.txt", sep="\t",
                     quoting=csv.QUOTE_NONE)
    return _pairs(df["word1"], df["word2"], df["SimLex999"])


def load_men(benchmark_root: str | os.PathLike, form: Literal["lemma", "natural"] = "lemma") -> pd.DataFrame:
    """MEN, all 3000 pairs.

    ``lemma`` (default): the lemma-form file with the POS suffix cut off, which is what the fork's
    ``fetch_MEN(which="all", form="natural")`` returns. ``natural``: the release's natural-form file.
    """
    name = {"lemma": "MEN_dataset_lemma_form_full", "natural": "MEN_dataset_natural_form_full"}[form]
    df = _read_table(Path(benchmark_root) / "wordsim/men" / name, sep=" ")
    if form == "lemma":
        strip = re.compile(r"-[a-z]$")
        return _pairs((strip.sub("", w) for w in df["word1"]), (strip.sub("", w) for w in df["word2"]),
                      df["score"])
    return _pairs(df["word1"], df["word2"], df["score"])


def load_ws353(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """WordSim-353, all 353 pairs (``combined.csv``)."""
    df = _read_table(Path(benchmark_root) / "wordsim/ws353/combined.csv")
    return _pairs(df["Word 1"], df["Word 2"], df["Human (mean)"])


def load_rw(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """Stanford Rare Words, 2034 pairs (mean scores)."""
    return _tsv3(Path(benchmark_root) / "wordsim/faruqui/EN-RW-STANFORD.txt")


def load_rg65(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """RG-65, 65 pairs."""
    return _tsv3(Path(benchmark_root) / "wordsim/faruqui/EN-RG-65.txt")


def load_mturk287(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """MTurk-287 (the fork's ``MTurk``), 287 pairs."""
    return _tsv3(Path(benchmark_root) / "wordsim/faruqui/EN-MTurk-287.txt")


def load_ws353_relatedness(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """WS353 relatedness split (Agirre et al. 2009), 252 pairs."""
    return _tsv3(Path(benchmark_root) / "wordsim/faruqui/EN-WS-353-REL.txt")


def load_ws353_similarity(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """WS353 similarity split (Agirre et al. 2009), 203 pairs."""
    return _tsv3(Path(benchmark_root) / "wordsim/faruqui/EN-WS-353-SIM.txt")


def load_google(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """Google analogies ``a:b :: c:d`` (19,544), lower-cased; section lines give ``category``."""
    rows, category = [], None
    with open(Path(benchmark_root) / "analogy/google/questions-words.txt", encoding="utf-8") as fh:
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
    df = _read_table(Path(benchmark_root) / "analogy/msr/msr.csv", index_col=0)
    out = pd.DataFrame({k: df[c].str.strip().str.lower() for k, c in
                        zip("abcd", ("word1", "word2", "word3", "target"))})
    out["category"] = df["type"].to_numpy()
    return out.reset_index(drop=True)


@dataclass(frozen=True)
class SemEval2012:
    """SemEval-2012 Task 2: prototype (paradigm) pairs and gold-rated pairs per subcategory."""

    prototypes: dict[str, list[tuple[str, str]]]
    pairs: pd.DataFrame  # category, split, word1, word2, score


_SEMEVAL_RATING = re.compile(r'^\s*(-?\d+(?:\.\d+)?)\s+"([^"]+):([^"]+)"\s*$')
_SEMEVAL_PAIR = re.compile(r"([^\s:,.]+)\s*:\s*([^\s:,.]+)")


def load_semeval2012_2(benchmark_root: str | os.PathLike,
                       which: Literal["all", "train", "test"] = "all") -> SemEval2012:
    """SemEval-2012 Task 2 with the gold ("golden") ratings: 79 subcategories for ``all``.

    Prototypes are the pairs the Phase 1 question shows (``Phase1Questions-<c>.txt``; some are
    written ``a:b. c:d`` or ``a: b``, which the fork's parser also splits); rated pairs and
    scores come from ``GoldRatings-<c>.txt``.
    """
    root = Path(benchmark_root) / "analogy/semeval2012_task2"
    splits = {"train": ["Training"], "test": ["Testing"], "all": ["Training", "Testing"]}[which]
    prototypes, rows = {}, []
    for split in splits:
        for gold in sorted((root / "GoldRatings" / split).glob("GoldRatings-*.txt")):
            cat = gold.stem.removeprefix("GoldRatings-")
            question = (root / split / "Phase1Questions" / f"Phase1Questions-{cat}.txt").read_text("utf-8")
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
    return pd.DataFrame({"word": df["word"].str.strip().str.lower().to_numpy(),
                         "category": df["category"].to_numpy()})


def load_bless(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """BLESS categorization: 200 words in 17 categories."""
    return _categories(Path(benchmark_root) / "categorization/bless.csv")


def load_ap(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """Almuhareb-Poesio: 402 words in 21 categories."""
    return _categories(Path(benchmark_root) / "categorization/ap.csv")


def load_battig(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """Battig: 5,231 (word, category) rows in 56 categories."""
    return _categories(Path(benchmark_root) / "categorization/battig.csv")


def load_essli_2c(benchmark_root: str | os.PathLike) -> pd.DataFrame:
    """ESSLLI-2008 verb categorization (the fork's ``ESSLI_2c``): 45 verbs in 9 classes."""
    return _categories(Path(benchmark_root) / "categorization/essli-2008.csv")


# --------------------------------------------------------------------------- scoring

@dataclass(frozen=True)
class TaskScore:
    """A benchmark result: the score, the share of items fully in vocabulary, the item count."""

    score: float
    coverage: float
    n_items: int


def score_similarity(emb: StaticEmbedding, pairs: pd.DataFrame) -> TaskScore:
    """Spearman rho between cosine similarity and human score; OOV words get the mean vector."""
    a, known_a = emb.lookup(pairs["word1"])
    b, known_b = emb.lookup(pairs["word2"])
    a, b = a.astype(np.float64), b.astype(np.float64)
    dot = np.einsum("ij,ij->i", a, b)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosine = np.divide(dot, norms, out=np.zeros_like(dot), where=norms > 0)
    rho = spearmanr(cosine, pairs["score"].to_numpy(float)).statistic
    return TaskScore(float(rho), float(np.mean(known_a & known_b)), len(pairs))


def score_analogy(emb: StaticEmbedding, questions: pd.DataFrame, chunk_size: int = 2048) -> TaskScore:
    """3CosAdd accuracy: argmax over the vocabulary of cos(x, b - a + c), question words excluded.

    Every question counts; one whose answer is out of vocabulary is wrong. Scores are computed
    as chunked matrix products.
    """
    words = emb.vectors
    ids = np.stack([emb.ids(questions[col]) for col in "abcd"], axis=1)
    vecs = [emb.lookup(questions[col])[0] for col in "abc"]
    correct = 0
    for start in range(0, len(questions), chunk_size):
        stop = min(start + chunk_size, len(questions))
        target = vecs[1][start:stop] - vecs[0][start:stop] + vecs[2][start:stop]
        sims = target @ words.T
        asked = ids[start:stop, :3]
        rows = np.broadcast_to(np.arange(stop - start)[:, None], asked.shape)
        sims[rows[asked >= 0], asked[asked >= 0]] = -np.inf
        correct += int(np.sum(sims.argmax(axis=1) == ids[start:stop, 3]))
    n = len(questions)
    return TaskScore(correct / n if n else math.nan, float(np.mean((ids >= 0).all(axis=1))), n)


def score_semeval2012(emb: StaticEmbedding, data: SemEval2012) -> TaskScore:
    """Mean over subcategories of Spearman rho(gold, (proto_left - proto_right) . (x - y)).

    proto_left/right are the means of the prototype pairs' first/second words; a subcategory
    whose correlation is undefined (constant scores) counts as 0, as in the fork.
    """
    rhos = []
    for cat, group in data.pairs.groupby("category", sort=False):
        left = emb.lookup(p[0] for p in data.prototypes[cat])[0].astype(np.float64).mean(axis=0)
        right = emb.lookup(p[1] for p in data.prototypes[cat])[0].astype(np.float64).mean(axis=0)
        x = emb.lookup(group["word1"])[0].astype(np.float64)
        y = emb.lookup(group["word2"])[0].astype(np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConstantInputWarning)
            rho = spearmanr((x - y) @ (left - right), group["score"].to_numpy(float)).statistic
        rhos.append(0.0 if np.isnan(rho) else float(rho))
    known = (emb.ids(data.pairs["word1"]) >= 0) & (emb.ids(data.pairs["word2"]) >= 0)
    return TaskScore(float(np.mean(rhos)), float(np.mean(known)), len(data.pairs))


def cluster_purity(labels_true: Sequence, labels_pred: Sequence) -> float:
    """Purity: share of items in the majority gold class of their cluster (sklearn contingency)."""
    table = contingency_matrix(labels_true, labels_pred)
    return float(table.max(axis=0).sum() / table.sum())


def score_categorization(emb: StaticEmbedding, items: pd.DataFrame, seed: int) -> TaskScore:
    """Best purity over the fork's clusterings, with as many clusters as gold categories.

    Items are shuffled with ``seed`` first (as the fork does), which fixes tie-breaking;
    KMeans uses ``n_init=10`` and ``random_state=seed``. BLAS is kept to one thread: KMeans runs
    its own OpenMP threads, and nesting both made it ~40x slower on a 2-core machine.
    """
    vectors, known = emb.lookup(items["word"])
    order = np.random.RandomState(seed).permutation(len(items))
    x = vectors.astype(np.float64)[order]
    y = items["category"].to_numpy()[order]
    k = len(set(y))
    models = [AgglomerativeClustering(n_clusters=k, linkage="ward")]
    models += [AgglomerativeClustering(n_clusters=k, metric=metric, linkage=linkage)
               for metric in ("cosine", "euclidean") for linkage in ("average", "complete")]
    models.append(KMeans(n_clusters=k, n_init=10, random_state=seed))
    with threadpool_limits(limits=1, user_api="blas"):
        purity = max(cluster_purity(y, model.fit_predict(x)) for model in models)
    return TaskScore(purity, float(np.mean(known)), len(items))


# Task name -> (metric, loader, scorer(emb, data, seed)).
_TASKS: dict[str, tuple[str, Callable, Callable]] = {
    "SimLex999": ("spearman", load_simlex999, lambda e, d, s: score_similarity(e, d)),
    "MEN": ("spearman", load_men, lambda e, d, s: score_similarity(e, d)),
    "WS353": ("spearman", load_ws353, lambda e, d, s: score_similarity(e, d)),
    "RW": ("spearman", load_rw, lambda e, d, s: score_similarity(e, d)),
    "Google": ("accuracy", load_google, lambda e, d, s: score_analogy(e, d)),
    "MSR": ("accuracy", load_msr, lambda e, d, s: score_analogy(e, d)),
    "SemEval2012_2": ("spearman", load_semeval2012_2, lambda e, d, s: score_semeval2012(e, d)),
    "BLESS": ("purity", load_bless, score_categorization),
    "AP": ("purity", load_ap, score_categorization),
    "RG65": ("spearman", load_rg65, lambda e, d, s: score_similarity(e, d)),
    "MTurk": ("spearman", load_mturk287, lambda e, d, s: score_similarity(e, d)),
    "WS353R": ("spearman", load_ws353_relatedness, lambda e, d, s: score_similarity(e, d)),
    "WS353S": ("spearman", load_ws353_similarity, lambda e, d, s: score_similarity(e, d)),
    "Battig": ("purity", load_battig, score_categorization),
    "ESSLI_2c": ("purity", load_essli_2c, score_categorization),
}

TASK_METRIC = {task: metric for task, (metric, _, _) in _TASKS.items()}


def load_benchmarks(benchmark_root: str | os.PathLike, tasks: Sequence[str] = TABLE1_TASKS) -> dict[str, object]:
    """Load each task's data once, to score many embeddings without re-reading the files."""
    unknown = set(tasks) - set(_TASKS)
    if unknown:
        raise ValueError(f"unknown tasks {sorted(unknown)}; known: {list(_TASKS)}")
    return {task: _TASKS[task][1](benchmark_root) for task in tasks}


def evaluate_embedding(emb: StaticEmbedding, benchmark_root: str | os.PathLike | Mapping[str, object],
                       seed: int = 0, tasks: Sequence[str] = TABLE1_TASKS) -> pd.DataFrame:
    """Score ``emb`` on ``tasks``: one row per task with task, metric, score, coverage, n_items.

    ``benchmark_root`` is the benchmark folder, or the output of :func:`load_benchmarks`.
    """
    data = (benchmark_root if isinstance(benchmark_root, Mapping)
            else load_benchmarks(benchmark_root, tasks))
    rows = []
    for task in tasks:
        metric, _, scorer = _TASKS[task]
        result = scorer(emb, data[task], seed)
        rows.append({"task": task, "metric": metric, "score": result.score,
                     "coverage": result.coverage, "n_items": result.n_items})
    return pd.DataFrame(rows, columns=["task", "metric", "score", "coverage", "n_items"])


# --------------------------------------------------------------------------- Table 1 and figure

def _method_label(model: str, layer: float) -> str:
    """``GloVe`` for a baseline (no layer), ``BERT, Layer 1`` for a layer's PC embedding."""
    return model if pd.isna(layer) else f"{model}, Layer {int(layer)}"


def _ordered_methods(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, layer): baselines first, then models in order of appearance by layer."""
    methods = results[["model", "layer"]].drop_duplicates().reset_index(drop=True)
    first_seen = {m: i for i, m in reversed(list(enumerate(methods["model"])))}
    methods["_baseline"] = methods["layer"].notna()
    methods["_model_order"] = methods["model"].map(first_seen)
    methods = methods.sort_values(["_baseline", "_model_order", "layer"], kind="stable")
    methods["method"] = [_method_label(m, layer) for m, layer in zip(methods["model"], methods["layer"])]
    return methods[["method", "model", "layer"]].reset_index(drop=True)


def _wide(results: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    """Scores and coverages of this run, one row per method, in table order."""
    methods = _ordered_methods(results)
    keyed = results.assign(method=[_method_label(m, layer) for m, layer in zip(results["model"], results["layer"])])
    scores = keyed.pivot_table(index="method", columns="task", values="score", aggfunc="first", dropna=False)
    cover = keyed.pivot_table(index="method", columns="task", values="coverage", aggfunc="first", dropna=False)
    table = methods.assign(source="this run")
    for task in tasks:
        table[task] = table["method"].map(scores[task]) if task in scores else math.nan
    for task in tasks:
        table[f"coverage_{task}"] = table["method"].map(cover[task]) if task in cover else math.nan
    return table


def _fmt(value: float) -> str:
    """Three decimals, an en dash for a missing value."""
    return "–" if pd.isna(value) else f"{value:.3f}"


def _bold_mask(block: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    """True where a value equals its column's best (as displayed, so ties are all bold)."""
    shown = block[tasks].astype(float).round(3)
    return shown.eq(shown.max(axis=0)) & shown.notna()


def _latex_escape(text: str) -> str:
    """Escape the LaTeX special characters of a label."""
    return re.sub(r"([&%$#_{}])", r"\\\1", text).replace("~", r"\textasciitilde{}").replace("^", r"\^{}")


def build_table1(results: pd.DataFrame, out_csv: str | os.PathLike, out_md: str | os.PathLike,
                 out_tex: str | os.PathLike, include_paper: bool = True) -> pd.DataFrame:
    """Write Table 1 as CSV, Markdown and LaTeX; return the CSV's table.

    ``results`` has one row per (model, layer, task) with columns ``model`` (display label),
    ``layer`` (NaN for a baseline such as GloVe), ``task``, ``score`` and ``coverage``. The best
    value per column among this run's rows is bold; the paper's rows (spec §6.5) follow as a
    separate, unbolded reference block. The CSV also holds the coverage of every cell.
    """
    tasks = [t for t in TABLE1_TASKS if t in set(results["task"])]
    tasks += [t for t in dict.fromkeys(results["task"]) if t not in tasks]
    run = _wide(results, tasks)
    paper = pd.DataFrame([{"method": label, "model": label.split(",")[0],
                           "layer": float(label.split("Layer ")[1]) if "Layer" in label else math.nan,
                           "source": "paper", **{t: values.get(t, math.nan) for t in tasks}}
                          for label, values in PAPER_TABLE1.items()]) if include_paper else run.iloc[:0]
    table = pd.concat([run, paper], ignore_index=True)[["source", "method", "model", "layer", *tasks,
                                                        *[f"coverage_{t}" for t in tasks]]]
    with atomic_path(out_csv) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")

    header = ["Static embedding", *[TASK_DISPLAY.get(t, t) for t in tasks]]
    metrics = ", ".join(f"{TASK_DISPLAY.get(t, t)}: {TASK_METRIC.get(t, 'score')}" for t in tasks)
    bold = _bold_mask(run, tasks)

    def md_rows(block: pd.DataFrame, mask: pd.DataFrame | None) -> list[str]:
        return ["| " + " | ".join([row["method"]] + [
            f"**{_fmt(row[t])}**" if mask is not None and mask.at[i, t] else _fmt(row[t]) for t in tasks]) + " |"
            for i, row in block.iterrows()]

    md = ["Table 1: static embeddings on word benchmarks; best of this run in bold.", "",
          f"Metrics: {metrics}.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header), *md_rows(run, bold)]
    if include_paper:
        md += ["", "Paper (Ethayarajh 2019, Table 1), for reference:", "",
               "| " + " | ".join(header) + " |", "|" + "---|" * len(header), *md_rows(paper, None)]
    with atomic_path(out_md) as tmp:
        Path(tmp).write_text("\n".join(md) + "\n", encoding="utf-8")

    def tex_rows(block: pd.DataFrame, mask: pd.DataFrame | None) -> list[str]:
        return [" & ".join([_latex_escape(row["method"])] + [
            rf"\textbf{{{_fmt(row[t])}}}" if mask is not None and mask.at[i, t] else _fmt(row[t])
            for t in tasks]).replace("–", "--") + r" \\" for i, row in block.iterrows()]

    tex = [r"\begin{tabular}{l" + "r" * len(tasks) + "}", r"\hline",
           " & ".join(_latex_escape(h) for h in header) + r" \\", r"\hline", *tex_rows(run, bold)]
    if include_paper:
        tex += [r"\hline", rf"\multicolumn{{{len(header)}}}{{l}}{{\emph{{Paper (Ethayarajh 2019), reference}}}} \\",
                r"\hline", *tex_rows(paper, None)]
    tex += [r"\hline", r"\end{tabular}"]
    with atomic_path(out_tex) as tmp:
        Path(tmp).write_text("\n".join(tex) + "\n", encoding="utf-8")
    return table


def plot_scores_by_layer(results: pd.DataFrame, out_png: str | os.PathLike, out_pdf: str | os.PathLike) -> None:
    """One panel per task, score against layer, one line per model.

    Layer 0 (the input embeddings) is drawn as an open square; baselines without a layer
    (GloVe, FastText) are horizontal dashed lines. ``results`` is as for :func:`build_table1`.
    """
    tasks = [t for t in TABLE1_TASKS if t in set(results["task"])]
    tasks += [t for t in dict.fromkeys(results["task"]) if t not in tasks]
    layered = results[results["layer"].notna()]
    baselines = results[results["layer"].isna()]
    models = list(dict.fromkeys(layered["model"]))
    colors = [f"C{i % 10}" for i in range(len(models) + baselines["model"].nunique())]
    ncols = min(3, len(tasks))
    nrows = math.ceil(len(tasks) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.1 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, task in zip(axes, tasks):
        for i, model in enumerate(models):
            s = layered[(layered["model"] == model) & (layered["task"] == task)].sort_values("layer")
            ax.plot(s["layer"], s["score"], marker="o", markersize=3.5, linewidth=1.5, color=colors[i])
            zero = s[s["layer"] == 0]
            ax.plot(zero["layer"], zero["score"], linestyle="none", marker="s", markersize=7,
                    markerfacecolor="white", markeredgecolor=colors[i], markeredgewidth=1.5)
        for j, model in enumerate(dict.fromkeys(baselines["model"])):
            s = baselines[(baselines["model"] == model) & (baselines["task"] == task)]
            if len(s):
                ax.axhline(float(s["score"].iloc[0]), linestyle="--", linewidth=1.2, color=colors[len(models) + j])
        ax.set_title(f"{TASK_DISPLAY.get(task, task)} ({TASK_METRIC.get(task, 'score')})", fontsize=10)
        ax.set_xlabel("Layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3, linewidth=0.6)
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=colors[i], marker="o", markersize=4, label=m) for i, m in enumerate(models)]
    handles += [Line2D([], [], color=colors[len(models) + j], linestyle="--", label=m)
                for j, m in enumerate(dict.fromkeys(baselines["model"]))]
    handles.append(Line2D([], [], linestyle="none", marker="s", markerfacecolor="white",
                          markeredgecolor="black", label="layer 0 (input embeddings)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    fig.suptitle("Static (first principal component) embeddings on word benchmarks, by layer")
    for path, fmt, meta in ((out_png, "png", {"Software": None}),
                            (out_pdf, "pdf", {"CreationDate": None, "ModDate": None})):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, metadata=meta)


def shared_vocabulary(word_index_path: str | os.PathLike) -> set[str]:
    """The lower-cased word index: the one vocabulary every static embedding is trimmed to (spec §5.2)."""
    return set(pd.read_parquet(word_index_path, columns=["word"])["word"].str.lower())


def score_pc_layers(pc_files: Sequence[str | os.PathLike], vocabulary: set[str], benchmark_root: str | os.PathLike,
                    label: str, seed: int) -> pd.DataFrame:
    """Score each ``layer_{L}.txt`` PC embedding of one model; rows carry ``model`` (``label``) and ``layer``."""
    if not pc_files:
        raise FileNotFoundError("no layer_*.txt PC embeddings to score")
    data = load_benchmarks(benchmark_root)
    frames = []
    for path in sorted(map(Path, pc_files), key=lambda p: int(p.stem.split("_")[1])):
        layer = int(path.stem.split("_")[1])
        emb = load_embedding_text(path, vocabulary)
        frames.append(evaluate_embedding(emb, data, seed=seed).assign(model=label, layer=layer))
    return pd.concat(frames, ignore_index=True)


def score_baseline_file(path: str | os.PathLike, vocabulary: set[str], benchmark_root: str | os.PathLike,
                        label: str, seed: int) -> pd.DataFrame:
    """Score a user-supplied static embedding (GloVe, FastText, ...) trimmed to ``vocabulary``."""
    emb = load_embedding_text(path, vocabulary)
    return evaluate_embedding(emb, benchmark_root, seed=seed).assign(model=label, layer=float("nan"))
