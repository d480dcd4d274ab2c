"""The ``measure_senses`` job: every layer of one model, every sense measure, each layer file read once.

The STS layer gives the polysemy regression (P1), the clusterability contrast (C1-C3) and the output-layer
measures (B1-B4); the WordNet usages' layer gives the labelled sense separation (A1-A3, C5). Each measure is
computed on centred and on standardised vectors (the layer's mean and per-dimension standard deviation over
the STS occurrences the measures use: for a decoder, not its sentence-initial rows), so that the anisotropy and the rogue dimensions do not dominate every cosine; the
output layer is read on the hidden states themselves, as the model does. Occurrences at a sentence's first
word are left out where a decoder has no left context there (counted in the rows' ``note``).

Output: ``rows`` (long format: one row per measure and preprocessing, with its null, interval, p and count) and
``words`` (one row per word form of the STS index with a WordNet entry: its per-layer values).
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.settings import SenseSettings
from contextuality.extraction.faithful import is_decoder
from contextuality.senses import clusters, polysemy, separation
from contextuality.senses.combine import ROW_COLUMNS
from contextuality.senses.output_layer import output_layer_rows, token_ids_of
from contextuality.senses.vectors import layer_moments, preprocess, unit_rows
from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader, check_layer, read_manifest

log = logging.getLogger(__name__)

PREPROCESSINGS = ("centred", "standardised")
# The per-word table's columns, whatever a model lacks (no output layer: no alignment ranks)
WORD_COLUMNS = ["model", "layer", "form", "n_used", "n_synsets", "pos", "polysemy", "context_diversity",
                "self_similarity_centred", "self_similarity_standardised",
                "cluster_index_centred", "cluster_index_standardised", "alignment_rank", "alignment_null_rank"]
BLOCK_ROWS = 20_000  # rows preprocessed at once (float64 copies)


@dataclass(frozen=True)
class SensePaths:
    """The files one ``measure_senses`` job reads (the rule's named inputs): every layer of both corpora."""

    layers: list[Path]  # the STS corpus's layer files, layer 0 first
    manifest: Path
    occurrences: Path
    units: Path
    tokens: Path
    spacy_words: Path
    inventory: Path
    diversity: Path
    usages: Path
    pairs: Path
    senses_layers: list[Path]  # the usages' layer files, the same layers
    senses_manifest: Path
    senses_units: Path
    model: Path
    record: Path


@dataclass
class SenseContext:
    """What every layer's measures share, prepared once per model: the occurrences and words used, the output
    head, each occurrence's tokens, the usages' rows and the separation design (with its permutations)."""

    decoder: bool
    occurrences: pd.DataFrame
    note: str
    words: pd.DataFrame
    head: object
    head_reason: str
    tokens: tuple  # (own, following, unigram counts) of the occurrences
    usages: pd.DataFrame
    usage_rows: np.ndarray
    usage_note: str
    design: object


class Rows:
    """The long table of one layer's measures."""

    def __init__(self, model: str, layer: int):
        self.model, self.layer, self.rows = model, layer, []

    def add(self, family: str, measure: str, preprocessing: str, value, *, null=np.nan, ci=(np.nan, np.nan),
            p=np.nan, n=0, note: str = "") -> None:
        self.rows.append([self.model, self.layer, family, measure, preprocessing, _float(value), _float(null),
                          _float(ci[0]), _float(ci[1]), _float(p), int(n), note])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=ROW_COLUMNS)


def _float(value) -> float:
    return float("nan") if value is None else float(value)


def word_seed(seed: int, word: str) -> int:
    """A word's own seed: the same subsample rows at every layer, whatever else the layer measures."""
    return (seed * 1_000_003 + zlib.crc32(word.encode("utf-8"))) % 2**32


def model_type(model_dir: Path) -> str | None:
    """``config.json``'s model type, or None for a model without one (ELMo: a bidirectional LSTM, no decoder)."""
    config = Path(model_dir) / "config.json"
    return json.loads(config.read_text()).get("model_type") if config.is_file() else None


# --------------------------------------------------------------------------------------------------
# The STS corpus's occurrences, as the sense measures use them


def sts_occurrences(occurrences: pd.DataFrame, units: pd.DataFrame, spacy_words: pd.DataFrame, *,
                    decoder: bool) -> tuple[pd.DataFrame, dict]:
    """The indexed occurrences whose stored unit is the whole spaCy word, with their lower-cased form.

    A subword model's piece ``bank`` also occurs inside longer words: only units whose word *is* the piece
    count (spec pitfall 8). A decoder's occurrences at a sentence's first word have no left context and are
    left out. Returns the table (``row``, ``form``, ``word``, ``sentence_id``, ``word_position``, ``token_first``,
    ``token_last``) and the counts left out.
    """
    joined = occurrences[["word", "row"]].merge(
        units[["row", "sentence_id", "word_position", "unit", "token_first", "token_last"]], on="row", how="left")
    joined = joined.merge(spacy_words[["sentence_id", "position", "word"]].rename(
        columns={"position": "word_position", "word": "spacy_word"}), on=["sentence_id", "word_position"], how="left")
    whole = joined["unit"].str.lower() == joined["spacy_word"].str.lower()
    initial = joined["word_position"] == 0
    keep = whole & ~(initial & decoder)
    counts = {"not_whole_word": int((~whole).sum()), "sentence_initial": int((whole & initial & decoder).sum())}
    table = joined[keep].assign(form=lambda t: t["spacy_word"].str.lower())
    columns = ["row", "form", "word", "sentence_id", "word_position", "token_first", "token_last"]
    return table[columns].reset_index(drop=True), counts


def self_similarity_by_form(vectors, forms: np.ndarray, *, transform=None, block_rows: int = BLOCK_ROWS) -> pd.DataFrame:
    """Exact mean cosine over ordered pairs i != j of each form's rows (zero rows left out), float64.

    ``vectors``: an array, or anything indexable by a row range; ``transform`` (the preprocessing) is applied
    block by block, so the float64 copies never hold more than ``block_rows`` rows.
    """
    from scipy import sparse

    codes, names = pd.factorize(forms)
    sums, n = np.zeros((len(names), vectors.shape[1])), np.zeros(len(names))
    for first in range(0, len(forms), block_rows):
        block = np.asarray(vectors[first:first + block_rows], dtype=np.float64)
        unit = unit_rows(transform(block) if transform else block)
        nonzero = (np.abs(unit).sum(axis=1) > 0).astype(np.float64)
        indicator = sparse.csr_matrix((nonzero, (codes[first:first + block_rows], np.arange(len(unit)))),
                                      shape=(len(names), len(unit)))
        sums += indicator @ unit
        n += np.asarray(indicator.sum(axis=1)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n >= 2, ((sums**2).sum(axis=1) - n) / (n * (n - 1)), np.nan)
    return pd.DataFrame({"form": names, "n": n.astype(np.int64), "self_similarity": value})


# --------------------------------------------------------------------------------------------------
# The job


def measure_senses(paths: SensePaths, settings: SenseSettings, *, seed: int, model: str, head_loader=None,
                   threads: int = 1, progress=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every sense measure of every layer of one model: the long ``rows`` table and the per-word table.

    One job per model: the imports, the output head, the tables and the separation design's permutations are
    prepared once, then each layer of both corpora is read once. ``threads``: BLAS, OpenMP and torch threads.
    """
    import torch
    from threadpoolctl import threadpool_limits

    if len(paths.layers) != len(paths.senses_layers):
        raise StoreError(f"{len(paths.layers)} STS layer files but {len(paths.senses_layers)} of the usages' corpus; "
                         "rerun snakemake so that both stores hold every layer")
    torch.set_num_threads(max(1, threads))
    with threadpool_limits(limits=threads):
        context = prepare(paths, settings, seed=seed, head_loader=head_loader)
        manifests = read_manifest(paths.manifest), read_manifest(paths.senses_manifest)
        tables = [measure_layer(context, layer, paths, manifests, settings, seed=seed, model=model)
                  for layer in (progress or (lambda layers: layers))(range(len(paths.layers)))]
    rows = pd.concat([table for table, _ in tables], ignore_index=True)
    words = pd.concat([table for _, table in tables], ignore_index=True)
    return rows, words


def prepare(paths: SensePaths, settings: SenseSettings, *, seed: int, head_loader=None) -> SenseContext:
    """The model's shared tables (see SenseContext)."""
    decoder = is_decoder(model_type(paths.model))
    occurrences, dropped = sts_occurrences(pd.read_parquet(paths.occurrences), pd.read_parquet(paths.units),
                                           pd.read_parquet(paths.spacy_words), decoder=decoder)
    note = (f"{dropped['sentence_initial']} sentence-initial occurrences left out (decoder)" if decoder
            else "encoder: sentence-initial occurrences kept")
    words = _word_table(occurrences, pd.read_parquet(paths.inventory), pd.read_parquet(paths.diversity))
    head, reason = head_loader() if head_loader is not None else (None, "no output head was loaded")
    tokens = token_ids_of(pd.read_parquet(paths.tokens), occurrences) if head is not None else None  # B1, B2
    usages, units = pd.read_parquet(paths.usages), pd.read_parquet(paths.senses_units)
    usage_rows = usage_row_numbers(usages, units)
    unstored, initial = int((usage_rows < 0).sum()), usages["position"].to_numpy() == 0
    if decoder:
        usage_rows = np.where(initial, -1, usage_rows)
    usage_note = (f"{int(initial.sum())} sentence-initial usages left out (decoder)" if decoder
                  else "encoder: sentence-initial usages kept") + f"; {unstored} usages not stored as one unit"
    design = separation.SeparationDesign(usages, pd.read_parquet(paths.pairs), permutations=settings.permutations,
                                         seed=seed)
    return SenseContext(decoder, occurrences, note, words, head, reason, tokens, usages, usage_rows, usage_note, design)


def measure_layer(context: SenseContext, layer: int, paths: SensePaths, manifests, settings: SenseSettings, *,
                  seed: int, model: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One layer's rows and words: the STS layer and the usages' layer, each read once."""
    rows = Rows(model, layer)
    check_layer(paths.layers[layer], manifests[0], layer)
    check_layer(paths.senses_layers[layer], manifests[1], layer)
    with LayerReader(paths.layers[layer], manifests[0]) as reader:
        x = reader.rows(dtype=np.float32)
        after_final_norm = bool(int(reader.handle.attrs.get("after_final_norm", 0)))
    # the moments of the rows the measures use: a decoder's sentence-initial rows (its attention sink, with
    # activations 1,000 times the median in SmolLM2) would shift the mean so far that every centred vector
    # points one way (spec pitfall 3)
    used = context.occurrences["row"].to_numpy()
    mean, std = layer_moments(x[used[first:first + BLOCK_ROWS]] for first in range(0, len(used), BLOCK_ROWS))
    words = _regression(rows, context.words, x, mean, std, context.occurrences, settings, context.note)
    words = _clusterability(rows, words, x, mean, std, context.occurrences, settings, seed, context.note)
    words = output_layer_rows(rows, words, x, context.occurrences, context.tokens, context.head, context.head_reason,
                              settings, seed, after_final_norm=after_final_norm)
    del x
    with LayerReader(paths.senses_layers[layer], manifests[1]) as reader:
        stored = reader.rows(dtype=np.float32)
    _separation(rows, context, stored, mean, std)
    return rows.frame(), words.assign(model=model, layer=layer).reindex(columns=WORD_COLUMNS)


def _word_table(occurrences: pd.DataFrame, inventory: pd.DataFrame, diversity: pd.DataFrame) -> pd.DataFrame:
    """One row per form with a WordNet entry: occurrences used, sense counts, POS, context diversity."""
    counts = occurrences.groupby("form").size().rename("n_used").reset_index()
    table = counts.merge(inventory[["form", "n_synsets", "pos", "polysemy"]], on="form", how="inner")
    # a form's diversity: its casings' values weighted by their occurrences
    weighted = diversity.assign(form=diversity["word"].str.lower(), weighted=diversity["context_diversity"] * diversity["n"],
                                weight=diversity["n"].where(diversity["context_diversity"].notna(), 0))
    sums = weighted.groupby("form")[["weighted", "weight"]].sum(min_count=1)
    by_form = (sums["weighted"] / sums["weight"].where(sums["weight"] > 0)).rename("context_diversity").reset_index()
    return table.merge(by_form, on="form", how="left").sort_values("form").reset_index(drop=True)


def _regression(rows: Rows, words: pd.DataFrame, x, mean, std, occurrences, settings: SenseSettings, note: str):
    """P1: each form's self-similarity on log sense count, log frequency, context diversity and POS."""
    # only the forms with a WordNet entry (the regression's and W1's words): function words are most rows
    kept = occurrences[occurrences["form"].isin(words["form"])]
    forms, occurring = kept["form"].to_numpy(), x[kept["row"].to_numpy()]
    for kind in PREPROCESSINGS:
        selfsim = self_similarity_by_form(occurring, forms,
                                          transform=lambda block, kind=kind: preprocess(block, mean, std, kind))
        words = words.merge(selfsim[["form", "self_similarity"]].rename(
            columns={"self_similarity": f"self_similarity_{kind}"}), on="form", how="left")
        measured = selfsim[selfsim["n"] >= 2]
        rows.add("context", "mean_self_similarity", kind, measured["self_similarity"].mean(), n=len(measured),
                 note="mean over word forms with a WordNet entry of the exact mean cosine between a form's occurrences; "
                 + note)
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
        for term, measure in (("log_synsets", "beta_log_synsets"), ("context_diversity", "beta_context_diversity"),
                              ("log_n", "beta_log_n")):
            rows.add("polysemy", measure, kind, full.loc[term, "beta"], null=0.0,
                     ci=(full.loc[term, "ci_low"], full.loc[term, "ci_high"]), p=full.loc[term, "p"], n=n_words, note=note)
        rows.add("polysemy", "beta_log_synsets_without_diversity", kind, reduced.loc["log_synsets", "beta"], null=0.0,
                 ci=(reduced.loc["log_synsets", "ci_low"], reduced.loc["log_synsets", "ci_high"]),
                 p=reduced.loc["log_synsets", "p"], n=n_words, note=note)
        rows.add("polysemy", "r2", kind, full["r2"].iloc[0], null=reduced["r2"].iloc[0], n=n_words,
                 note="null: R2 without context diversity")
    return words


def _clusterability(rows: Rows, words: pd.DataFrame, x, mean, std, occurrences, settings: SenseSettings, seed: int,
                    note: str):
    """C1-C3: the cluster index of polysemous words against frequency-matched monosemous ones."""
    eligible = words[words["n_used"] >= settings.cluster_subsample].rename(columns={"form": "word", "n_used": "n"})
    matched = clusters.matched_mono_poly(eligible, per_group=settings.cluster_words, seed=seed)
    chosen = occurrences[occurrences["form"].isin(matched["word"])].sort_values(["form", "row"], kind="stable")
    forms, starts = np.unique(chosen["form"].to_numpy(), return_index=True)
    rows_of = dict(zip(forms, np.split(chosen["row"].to_numpy(), starts[1:])))
    for kind in PREPROCESSINGS:
        index = {}
        for word in matched["word"]:
            vectors = preprocess(x[rows_of[word]], mean, std, kind)
            index[word] = clusters.word_cluster_index(
                vectors, m=settings.cluster_subsample, subsamples=settings.cluster_subsamples,
                components=settings.cluster_components, seed=word_seed(seed, word))
        group = matched.set_index("word")["polysemy"]
        ci = pd.Series(index, dtype=np.float64)
        poly, mono = ci[group[ci.index] == "poly"].to_numpy(), ci[group[ci.index] == "mono"].to_numpy()
        if len(poly) < 2 or len(mono) < 2:
            rows.add("clusterability", "delta_cluster_index", kind, np.nan, n=len(poly) + len(mono),
                     note="not measurable: fewer than 2 matched words in a group")
        else:
            contrast = clusters.cluster_contrast(poly, mono)
            rows.add("clusterability", "delta_cluster_index", kind, contrast["delta_ci"], null=0.0,
                     ci=(contrast["ci_low"], contrast["ci_high"]), p=contrast["mw_p"], n=len(poly) + len(mono), note=note)
            rows.add("clusterability", "cluster_index_poly", kind, poly.mean(), null=mono.mean(), n=len(poly),
                     note="null: the matched monosemous words' mean")
        if settings.cluster_null_draws and len(poly):
            flags = [clusters.gaussian_null_p(preprocess(x[rows_of[word]], mean, std, kind),
                                              m=settings.cluster_subsample, components=settings.cluster_components,
                                              draws=settings.cluster_null_draws, seed=word_seed(seed, word)) <= 0.05
                     for word in ci.index[group[ci.index] == "poly"]]  # fmt: skip
            rows.add("clusterability", "share_gaussian_null_rejected", kind, np.mean(flags), null=0.05, n=len(flags),
                     note="Gaussian null of the same covariance, alpha 0.05 (conservative)")
        words = words.merge(ci.rename(f"cluster_index_{kind}").rename_axis("form").reset_index(), on="form", how="left")
    return words


def _separation(rows: Rows, context: SenseContext, stored: np.ndarray, mean, std) -> None:
    """A1-A3 on the WordNet usages: each usage's stored row, the same preprocessing as the STS layer."""
    present = context.usage_rows >= 0
    for kind in PREPROCESSINGS:
        vectors = np.full((len(context.usages), stored.shape[1]), np.nan)
        vectors[present] = preprocess(stored[context.usage_rows[present]], mean, std, kind)
        result = context.design.measure(vectors)
        note = context.usage_note
        rows.add("separation", "delta_within_between", kind, result["delta"], null=result["delta_null_mean"],
                 ci=(result["delta_ci_low"], result["delta_ci_high"]), p=result["delta_p"],
                 n=result["n_words_delta"], note=note)
        rows.add("separation", "auroc_same_sense", kind, result["auroc"], null=0.5,
                 ci=(result["auroc_ci_low"], result["auroc_ci_high"]), n=result["n_pairs_same"] + result["n_pairs_different"],
                 note=note)  # fmt: skip
        rows.add("separation", "auroc_same_sense_coarse", kind, result["auroc_coarse"], null=0.5,
                 n=result["n_pairs_same"] + result["n_pairs_coarse"], note=note)
        rows.add("separation", "knn_accuracy", kind, result["knn_accuracy"], null=result["knn_majority"],
                 n=result["n_knn"], note=f"null: leave-one-out majority sense; chance {result['knn_chance']:.3f}")


def usage_row_numbers(usages: pd.DataFrame, units: pd.DataFrame) -> np.ndarray:
    """Each usage's stored row in the usages' layer, or -1 where its word is not one stored unit.

    A unit belongs to the usage's word (same sentence, same spaCy position) and holds all of it: for
    ``indexing: word`` the unit is the word; for ``subword`` only a word that is a single piece qualifies.
    """
    whole = units[units["unit"].str.lower().str.strip() != ""]
    key = whole.assign(unit_lower=whole["unit"].str.lower())
    joined = usages[["usage_id", "sentence_id", "position", "form_lower"]].merge(
        key[["row", "sentence_id", "word_position", "unit_lower"]],
        left_on=["sentence_id", "position", "form_lower"], right_on=["sentence_id", "word_position", "unit_lower"],
        how="left").drop_duplicates("usage_id")  # fmt: skip
    rows = joined.set_index("usage_id")["row"].reindex(usages["usage_id"])
    return rows.fillna(-1).to_numpy(dtype=np.int64)
