"""The sense measures on a model's STS layer: each form's self-similarity, the polysemy regressions (P1, W4)
and the clusterability contrast with its pseudo-word control (C1-C3), each a group of rows of the long table
(``rows.Rows``) and columns of the per-word table."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from contextuality.core.settings import SenseSettings
from contextuality.senses.lexicon.tagger import content_words
from contextuality.senses.rows import PREPROCESSINGS, Rows
from contextuality.senses.sts import clusters, polysemy
from contextuality.senses.vectors import preprocess, unit_rows

BLOCK_ROWS = 20_000  # rows preprocessed at once (float64 copies)
# W4's confounds: general frequency and the word's length beside log n and context diversity
FREQUENCY_COVARIATES = ("zipf", "length")
CONTENT_MIN_PURITY = 0.9  # the content-word regression: a form's tagged POS is this share of its occurrences or more


def word_seed(seed: int, word: str) -> int:
    """A word's own seed: the same subsample rows at every layer, whatever else the layer measures."""
    return (seed * 1_000_003 + zlib.crc32(word.encode("utf-8"))) % 2**32


def self_similarity_by_form(
    vectors, forms: np.ndarray, *, transform=None, block_rows: int = BLOCK_ROWS
) -> pd.DataFrame:
    """Exact mean cosine over ordered pairs i != j of each form's rows (zero rows left out), float64.

    ``vectors``: an array, or anything indexable by a row range; ``transform`` (the preprocessing) is applied
    block by block, so the float64 copies never hold more than ``block_rows`` rows.
    """
    from scipy import sparse

    codes, names = pd.factorize(forms)
    sums, n = np.zeros((len(names), vectors.shape[1])), np.zeros(len(names))
    for first in range(0, len(forms), block_rows):
        block = np.asarray(vectors[first : first + block_rows], dtype=np.float64)
        unit = unit_rows(transform(block) if transform else block)
        nonzero = (np.abs(unit).sum(axis=1) > 0).astype(np.float64)
        indicator = sparse.csr_matrix(
            (nonzero, (codes[first : first + block_rows], np.arange(len(unit)))), shape=(len(names), len(unit))
        )
        sums += indicator @ unit
        n += np.asarray(indicator.sum(axis=1)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n >= 2, ((sums**2).sum(axis=1) - n) / (n * (n - 1)), np.nan)
    return pd.DataFrame({"form": names, "n": n.astype(np.int64), "self_similarity": value})


def regression_rows(
    rows: Rows, words: pd.DataFrame, x, mean, std, occurrences, settings: SenseSettings, note: str, tagged: pd.DataFrame
):
    """P1: each form's self-similarity on log sense count, log frequency, context diversity and POS; then with
    general frequency and length too (the spec's version), and on the tagged content words."""
    # only the forms with a WordNet entry (the regression's and W1's words): function words are most rows
    kept = occurrences[occurrences["form"].isin(words["form"])]
    forms, occurring = kept["form"].to_numpy(), x[kept["row"].to_numpy()]
    for kind in PREPROCESSINGS:
        selfsim = self_similarity_by_form(
            occurring, forms, transform=lambda block, kind=kind: preprocess(block, mean, std, kind)
        )
        words = words.merge(
            selfsim[["form", "self_similarity"]].rename(columns={"self_similarity": f"self_similarity_{kind}"}),
            on="form",
            how="left",
        )
        measured = selfsim[selfsim["n"] >= 2]
        rows.add(
            "context",
            "mean_self_similarity",
            kind,
            measured["self_similarity"].mean(),
            n=len(measured),
            note="mean over word forms with a WordNet entry of the exact mean cosine between a form's occurrences; "
            + note,
        )
        table = words[(words["n_used"] >= settings.regression_min_occurrences)
                      & words["context_diversity"].notna()].rename(columns={f"self_similarity_{kind}": "self_similarity",
                                                                           "n_used": "n", "form": "word"})  # fmt: skip
        try:
            full = polysemy.polysemy_regression(table).set_index("term")
            reduced = polysemy.polysemy_without_diversity(table).set_index("term")
        except ValueError as err:  # too few words, or a constant column (tiny corpora)
            rows.add("polysemy", "beta_log_synsets", kind, np.nan, n=len(table), note=f"not measurable: {err}")
            continue
        n_words = int(full["n_words"].iloc[0])
        terms = [("log_synsets", "beta_log_synsets"), ("context_diversity", "beta_context_diversity"),
                 ("log_n", "beta_log_n")]  # fmt: skip
        _add_betas(rows, kind, full, terms, n_words, note)
        _add_betas(rows, kind, reduced, [("log_synsets", "beta_log_synsets_without_diversity")], n_words, note)
        rows.add(
            "polysemy",
            "r2",
            kind,
            full["r2"].iloc[0],
            null=reduced["r2"].iloc[0],
            n=n_words,
            note="null: R2 without context diversity",
        )
        _frequency_regressions(rows, table, tagged, kind, note)
    return words


def _frequency_regressions(rows: Rows, table: pd.DataFrame, tagged: pd.DataFrame, kind: str, note: str) -> None:
    """W4 with frequency's confounds: log senses beside log n, context diversity, Zipf frequency, length and POS, for
    every form (WordNet's morphy POS and sense count) and for the tagged content words (the tagger's POS and lemma)."""
    morphy = (
        "POS and sense count from WordNet's morphy over all parts of speech (no tagger); covariates log n, "
        "context diversity, Zipf frequency (wordfreq), length in characters, POS"
    )
    content = table.drop(columns=["pos", "n_synsets"]).merge(
        content_words(tagged, CONTENT_MIN_PURITY).rename(columns={"form": "word", "n_synsets_tagged": "n_synsets"})[
            ["word", "pos", "n_synsets"]
        ],
        on="word",
    )
    tagger_note = (
        f"content words only: POS and lemma from spaCy's en_core_web_sm 3.8.0 tagger, POS purity >= "
        f"{CONTENT_MIN_PURITY}, spaCy's stop words and numerals out, WordNet senses of exactly (lemma, POS); "
        "covariates as the morphy version"
    )
    for suffix, subset, what in (("frequency", table, morphy), ("content", content, tagger_note)):
        try:
            fit = polysemy.polysemy_regression(subset, covariates=FREQUENCY_COVARIATES).set_index("term")
        except ValueError as err:
            rows.add(
                "polysemy", f"beta_log_synsets_{suffix}", kind, np.nan, n=len(subset), note=f"not measurable: {err}"
            )
            continue
        n_words = int(fit["n_words"].iloc[0])
        terms = [
            ("log_synsets", f"beta_log_synsets_{suffix}"),
            ("context_diversity", f"beta_context_diversity_{suffix}"),
        ]
        if suffix == "frequency":
            terms += [("zipf", "beta_zipf"), ("length", "beta_length")]
        _add_betas(rows, kind, fit, terms, n_words, f"{what}; {note}")


def _add_betas(rows: Rows, kind: str, fit: pd.DataFrame, terms: list, n_words: int, note: str) -> None:
    """One polysemy row per (term, measure) of ``terms``: the fit's coefficient of the term against 0, with its
    interval and p."""
    for term, measure in terms:
        ci = (fit.loc[term, "ci_low"], fit.loc[term, "ci_high"])
        rows.add("polysemy", measure, kind, fit.loc[term, "beta"], null=0.0, ci=ci, p=fit.loc[term, "p"], n=n_words,
                 note=note)  # fmt: skip


def clusterability_rows(
    rows: Rows,
    words: pd.DataFrame,
    x,
    mean,
    std,
    occurrences,
    settings: SenseSettings,
    seed: int,
    note: str,
    split=None,
):
    """C1-C3: the cluster index of polysemous words against monosemous ones matched on STS and general frequency,
    and the positive control: pseudo-words made of two of those monosemous words, on the same statistic. ``split``
    (a ``separation.split_control.SplitControl``): the same words' cluster indices at its scale, for the two-senses control."""
    matched, matching = _matched_words(words, settings, seed)
    rows_of = _rows_of_words(occurrences, matched["word"])
    group = matched.set_index("word")["polysemy"]
    pseudo = clusters.pseudo_word_pairs(group.index[group == "mono"], seed=seed)
    for kind in PREPROCESSINGS:
        vectors = {word: preprocess(x[rows_of[word]], mean, std, kind) for word in matched["word"]}
        ci, pseudo_ci = _cluster_indices(vectors, pseudo, settings, seed)
        poly, mono = ci[group[ci.index] == "poly"].to_numpy(), ci[group[ci.index] == "mono"].to_numpy()
        _contrast_rows(rows, kind, poly, mono, f"polysemous minus monosemous words {matching}; {note}")
        _pseudo_word_rows(rows, kind, pseudo_ci, mono)
        if split is not None:
            split.measure_reference(kind, vectors, group, {w: word_seed(seed, w) for w in vectors})
        if settings.cluster_null_draws:
            _gaussian_null_rows(rows, kind, vectors, ci.index, group, settings, seed)
        words = words.merge(ci.rename(f"cluster_index_{kind}").rename_axis("form").reset_index(), on="form", how="left")
    return words


def _matched_words(words: pd.DataFrame, settings: SenseSettings, seed: int) -> tuple[pd.DataFrame, str]:
    """The polysemous and monosemous words with enough STS occurrences, matched on their count and (where known)
    Zipf frequency; and how they were matched, in words."""
    eligible = words[words["n_used"] >= settings.cluster_subsample].rename(columns={"form": "word", "n_used": "n"})
    by = ("n", "zipf") if "zipf" in eligible.columns else ("n",)
    matched = clusters.matched_mono_poly(
        eligible, per_group=settings.cluster_words, seed=seed, by=by, bins=4 if len(by) == 2 else 8
    )
    matching = "matched on STS count and Zipf frequency" if len(by) == 2 else "matched on STS count"
    return matched, matching


def _rows_of_words(occurrences: pd.DataFrame, words) -> dict[str, np.ndarray]:
    """Each word's occurrence rows of the layer, in row order."""
    chosen = occurrences[occurrences["form"].isin(words)].sort_values(["form", "row"], kind="stable")
    forms, starts = np.unique(chosen["form"].to_numpy(), return_index=True)
    return dict(zip(forms, np.split(chosen["row"].to_numpy(), starts[1:])))


def _subsample_shape(settings: SenseSettings) -> dict:
    """The subsamples' size and principal components, as the cluster functions take them."""
    return dict(m=settings.cluster_subsample, components=settings.cluster_components)


def _cluster_indices(vectors: dict, pseudo, settings: SenseSettings, seed: int) -> tuple[pd.Series, np.ndarray]:
    """Each word's cluster index (by word) and each pseudo-word's, every one on its own seed's subsamples."""
    shape = _subsample_shape(settings)
    index = {
        word: clusters.word_cluster_index(
            vectors[word], subsamples=settings.cluster_subsamples, seed=word_seed(seed, word), **shape
        )
        for word in vectors
    }
    pseudo_ci = np.array(
        [
            clusters.pseudo_word_cluster_index(
                vectors[a],
                vectors[b],
                subsamples=settings.cluster_subsamples,
                seed=word_seed(seed, f"{a}+{b}"),
                **shape,
            )
            for a, b in pseudo
        ]
    )
    return pd.Series(index, dtype=np.float64), pseudo_ci


def _contrast_rows(rows: Rows, kind: str, poly: np.ndarray, mono: np.ndarray, note: str) -> None:
    """C3: polysemous minus monosemous words' mean cluster index, and the polysemous words' mean."""
    if len(poly) < 2 or len(mono) < 2:
        rows.add(
            "clusterability",
            "delta_cluster_index",
            kind,
            np.nan,
            n=len(poly) + len(mono),
            note="not measurable: fewer than 2 matched words in a group",
        )
        return
    row, _ = clusters.contrast_row(poly, mono)
    rows.add("clusterability", "delta_cluster_index", kind, **row, n=len(poly) + len(mono), note=note)
    rows.add(
        "clusterability",
        "cluster_index_poly",
        kind,
        poly.mean(),
        null=mono.mean(),
        n=len(poly),
        note="null: the matched monosemous words' mean",
    )


def _pseudo_word_rows(rows: Rows, kind: str, pseudo_ci: np.ndarray, mono: np.ndarray) -> None:
    """The positive control: pseudo-words minus the monosemous words they are made of, on the same statistic."""
    if len(pseudo_ci) >= 2 and len(mono) >= 2:
        row, _ = clusters.contrast_row(pseudo_ci, mono)
        rows.add(
            "clusterability",
            "delta_cluster_index_pseudo",
            kind,
            **row,
            n=len(pseudo_ci) + len(mono),
            note=f"positive control: {len(pseudo_ci)} pseudo-words (two matched monosemous words each, half "
            "of every subsample from each) minus the monosemous words; two-sided Mann-Whitney p",
        )
    else:
        rows.add(
            "clusterability",
            "delta_cluster_index_pseudo",
            kind,
            np.nan,
            n=len(pseudo_ci),
            note="not measurable: fewer than 2 pseudo-words or monosemous words",
        )


def _gaussian_null_rows(
    rows: Rows, kind: str, vectors: dict, measured, group, settings: SenseSettings, seed: int
) -> None:
    """The share of polysemous (then monosemous) words whose cluster index beats a Gaussian of the same covariance."""
    null = dict(draws=settings.cluster_null_draws, **_subsample_shape(settings))
    for measure, polysemy_group in (
        ("share_gaussian_null_rejected", "poly"),
        ("share_gaussian_null_rejected_mono", "mono"),
    ):
        flags = [
            clusters.gaussian_null_p(vectors[w], seed=word_seed(seed, w), **null)
            for w in measured[group[measured] == polysemy_group]
        ]
        if flags:
            rows.add(
                "clusterability",
                measure,
                kind,
                np.mean(np.array(flags) <= 0.05),
                null=0.05,
                n=len(flags),
                note="Gaussian null of the same covariance, alpha 0.05 (conservative)",
            )
