"""Static word embeddings and the nine word benchmarks of Table 1 (the paper's §4.3).

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

import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import ConstantInputWarning, spearmanr
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.metrics.cluster import contingency_matrix
from threadpoolctl import threadpool_limits

from contextuality.core.atomic import atomic_path
from contextuality.paper import TABLE1_TASKS
from contextuality.static.benchmark_files import TASKS
from contextuality.static.benchmarks import (
    SemEval2012,
    load_ap,
    load_battig,
    load_bless,
    load_essli_2c,
    load_google,
    load_men,
    load_msr,
    load_mturk287,
    load_rg65,
    load_rw,
    load_semeval2012_2,
    load_simlex999,
    load_ws353,
    load_ws353_relatedness,
    load_ws353_similarity,
)
from contextuality.static.embeddings import StaticEmbedding, load_embedding_text

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
    models += [
        AgglomerativeClustering(n_clusters=k, metric=metric, linkage=linkage)
        for metric in ("cosine", "euclidean")
        for linkage in ("average", "complete")
    ]
    models.append(KMeans(n_clusters=k, n_init=10, random_state=seed))
    with threadpool_limits(limits=1, user_api="blas"):
        purity = max(cluster_purity(y, model.fit_predict(x)) for model in models)
    return TaskScore(purity, float(np.mean(known)), len(items))


def _similarity(emb: StaticEmbedding, pairs: pd.DataFrame, seed: int) -> TaskScore:
    return score_similarity(emb, pairs)


def _analogy(emb: StaticEmbedding, questions: pd.DataFrame, seed: int) -> TaskScore:
    return score_analogy(emb, questions)


def _semeval(emb: StaticEmbedding, data: SemEval2012, seed: int) -> TaskScore:
    return score_semeval2012(emb, data)


# Task name (benchmark_files.TASKS: its metric and files) -> (loader, scorer(emb, data, seed)).
_SCORING: dict[str, tuple[Callable, Callable]] = {
    "SimLex999": (load_simlex999, _similarity), "MEN": (load_men, _similarity), "WS353": (load_ws353, _similarity),
    "RW": (load_rw, _similarity), "Google": (load_google, _analogy), "MSR": (load_msr, _analogy),
    "SemEval2012_2": (load_semeval2012_2, _semeval), "BLESS": (load_bless, score_categorization),
    "AP": (load_ap, score_categorization), "RG65": (load_rg65, _similarity), "MTurk": (load_mturk287, _similarity),
    "WS353R": (load_ws353_relatedness, _similarity), "WS353S": (load_ws353_similarity, _similarity),
    "Battig": (load_battig, score_categorization), "ESSLI_2c": (load_essli_2c, score_categorization),
}  # fmt: skip
# one task list: benchmark_files.TASKS's (the workflow's inputs and the metrics)
assert tuple(_SCORING) == tuple(TASKS), (tuple(_SCORING), tuple(TASKS))

# The fork's other benchmarks, not in the paper's Table 1 (contextuality.paper.TABLE1_TASKS): scored when asked for.
EXTRA_TASKS = tuple(task for task in TASKS if task not in TABLE1_TASKS)
TASK_METRIC = {task: spec.metric for task, spec in TASKS.items()}


def load_benchmarks(benchmark_root: str | os.PathLike, tasks: Sequence[str] = TABLE1_TASKS) -> dict[str, object]:
    """Load each task's data once, to score many embeddings without re-reading the files."""
    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise ValueError(f"unknown tasks {sorted(unknown)}; known: {list(TASKS)}")
    return {task: _SCORING[task][0](benchmark_root) for task in tasks}


def evaluate_embedding(
    emb: StaticEmbedding,
    benchmark_root: str | os.PathLike | Mapping[str, object],
    seed: int = 0,
    tasks: Sequence[str] = TABLE1_TASKS,
) -> pd.DataFrame:
    """Score ``emb`` on ``tasks``: one row per task with task, metric, score, coverage, n_items.

    ``benchmark_root`` is the benchmark folder, or the output of :func:`load_benchmarks`.
    """
    data = benchmark_root if isinstance(benchmark_root, Mapping) else load_benchmarks(benchmark_root, tasks)
    rows = []
    for task in tasks:
        metric, scorer = TASK_METRIC[task], _SCORING[task][1]
        result = scorer(emb, data[task], seed)
        rows.append(
            {
                "task": task,
                "metric": metric,
                "score": result.score,
                "coverage": result.coverage,
                "n_items": result.n_items,
            }
        )
    return pd.DataFrame(rows, columns=["task", "metric", "score", "coverage", "n_items"])


def shared_vocabulary(word_index_path: str | os.PathLike) -> set[str]:
    """The lower-cased word index: the one vocabulary every static embedding is trimmed to."""
    return set(pd.read_parquet(word_index_path, columns=["word"])["word"].str.lower())


def score_pc_layers(
    pc_files: Sequence[str | os.PathLike],
    vocabulary: set[str],
    benchmark_root: str | os.PathLike,
    label: str,
    seed: int,
) -> pd.DataFrame:
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


def score_baseline_file(
    path: str | os.PathLike, vocabulary: set[str], benchmark_root: str | os.PathLike, label: str, seed: int
) -> pd.DataFrame:
    """Score a user-supplied static embedding (GloVe, FastText, ...) trimmed to ``vocabulary``."""
    emb = load_embedding_text(path, vocabulary)
    return evaluate_embedding(emb, benchmark_root, seed=seed).assign(model=label, layer=float("nan"))


def write_scores(job, score: Callable[..., pd.DataFrame], embeddings, label: str) -> None:
    """A scoring rule's job (``job``: its ``snakemake`` object): ``score`` (``score_pc_layers``, ``score_baseline_file``)
    of ``embeddings`` trimmed to the run's word index (input ``word_index``), on its benchmarks (input ``benchmarks``)
    with its seed (params ``seed``), written to its output ``scores`` (CSV)."""
    vocabulary = shared_vocabulary(job.input.word_index)
    scores = score(embeddings, vocabulary, job.input.benchmarks, label=label, seed=job.params.seed)
    with atomic_path(job.output.scores) as tmp:
        scores.to_csv(tmp, index=False)
