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
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.settings import SenseSettings
from contextuality.extraction.faithful import is_decoder
from contextuality.senses import clusters, polysemy, separation, tagger
from contextuality.senses.combine import ROW_COLUMNS
from contextuality.senses.frequency import zipf_of
from contextuality.senses.output_layer import output_layer_rows, token_ids_of
from contextuality.senses.vectors import layer_moments, preprocess, unit_rows
from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader, check_layer, read_manifest

log = logging.getLogger(__name__)

PREPROCESSINGS = ("centred", "standardised")
# The per-word table's columns, whatever a model lacks (no output layer: no alignment ranks)
WORD_COLUMNS = ["model", "layer", "form", "n_used", "n_synsets", "pos", "polysemy", "context_diversity", "zipf",
                "length", "self_similarity_centred", "self_similarity_standardised",
                "cluster_index_centred", "cluster_index_standardised", "alignment_rank", "alignment_null_rank"]
BLOCK_ROWS = 20_000  # rows preprocessed at once (float64 copies)
# W4 as the spec asks (issue 36): general frequency and the word's length beside log n and context diversity
FREQUENCY_COVARIATES = ("zipf", "length")
# separation rows measured on centred vectors only (SeparationDesign.measure's controls)
CENTRED_ONLY = frozenset({"auroc_same_token", "auroc_stratified", "auroc_macro", "auroc_shape", "auroc_cosine_shape",
                          "heldout_balanced_accuracy"})
CONTENT_MIN_PURITY = 0.9  # the content-word regression: a form's tagged POS is this share of its occurrences or more


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
    tagged_forms: Path
    usages: Path
    pairs: Path
    senses_layers: list[Path]  # the usages' layer files, the same layers
    senses_manifest: Path
    senses_units: Path
    senses_tokens: Path
    senses_spacy_words: Path
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
    tagged: pd.DataFrame
    head: object
    head_reason: str
    tokens: tuple  # (own, following, unigram counts) of the occurrences
    usages: pd.DataFrame
    usage_rows: np.ndarray
    usage_note: str
    design: object
    token_note: str = ""
    control: dict = None  # layer 0's pair cosines per preprocessing (the paired bootstrap's control)


class Rows:
    """The long table of one layer's measures."""

    def __init__(self, model: str, layer: int):
        self.model, self.layer, self.rows = model, layer, []

    def add(self, family: str, measure: str, preprocessing: str, value, *, null=np.nan, ci=(np.nan, np.nan),
            p=np.nan, n=0, note: str = "") -> None:
        self.rows.append([self.model, self.layer, family, measure, preprocessing, _float(value), _float(null),
                          _float(ci[0]), _float(ci[1]), _float(p), int(n) if np.isfinite(n) else 0, note])

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
    tagged = pd.read_parquet(paths.tagged_forms)
    missing = sorted(set(tagger.FORM_COLUMNS) - set(tagged.columns))
    if missing:
        raise StoreError(f"{paths.tagged_forms}: lacks columns {missing}; rerun snakemake so that rule sense_tags "
                         "writes it again")
    head, reason = head_loader() if head_loader is not None else (None, "no output head was loaded")
    tokens = token_ids_of(pd.read_parquet(paths.tokens), occurrences) if head is not None else None  # B1, B2
    usages, units = pd.read_parquet(paths.usages), pd.read_parquet(paths.senses_units)
    usage_rows = usage_row_numbers(usages, units)
    unstored, initial = int((usage_rows < 0).sum()), usages["position"].to_numpy() == 0
    if decoder:
        usage_rows = np.where(initial, -1, usage_rows)
    usage_note = (f"{int(initial.sum())} sentence-initial usages left out (decoder)" if decoder
                  else "encoder: sentence-initial usages kept") + f"; {unstored} usages not stored as one unit"
    pairs = pd.read_parquet(paths.pairs)
    token_keys = usage_token_keys(usage_row_numbers(usages, units), units, pd.read_parquet(paths.senses_tokens))
    design = separation.SeparationDesign(usages, pairs, permutations=settings.permutations,
                                         bootstrap=settings.bootstrap, seed=seed,
                                         lengths=sentence_lengths(usages, pd.read_parquet(paths.senses_spacy_words)),
                                         token_keys=token_keys)
    return SenseContext(decoder, occurrences, note, words, tagged, head, reason, tokens, usages, usage_rows, usage_note,
                        design,
                        token_note=_token_note(usages, pairs, token_keys, usage_rows), control={})


def sentence_lengths(usages: pd.DataFrame, spacy_words: pd.DataFrame) -> np.ndarray:
    """Each usage's sentence length in spaCy words (punctuation included), for the shape baselines."""
    lengths = spacy_words.groupby("sentence_id").size()
    found = lengths.reindex(usages["sentence_id"].to_numpy())
    if found.isna().any():
        raise StoreError(f"{int(found.isna().sum())} usages name a sentence the usages' spaCy words lack; rerun "
                         "snakemake so that rule sense_usages writes both together")
    return found.to_numpy(np.int64)


def usage_token_keys(usage_rows: np.ndarray, units: pd.DataFrame, tokens: pd.DataFrame) -> np.ndarray:
    """An integer per usage naming the token sequence of its stored unit (-1: no stored unit): two usages with
    the same key are the same input to the model's embedding layer."""
    ids = tokens.set_index("sentence_id")["input_ids"]
    unit = units.set_index("row").loc[usage_rows[usage_rows >= 0], ["sentence_id", "token_first", "token_last"]]
    pieces = [tuple(np.asarray(ids.loc[sentence])[first:last + 1].tolist())
              for sentence, first, last in unit.itertuples(index=False)]
    keys = np.full(len(usage_rows), -1, dtype=np.int64)
    keys[usage_rows >= 0] = pd.factorize(pd.Series(pieces, dtype=object))[0]
    return keys


def _token_note(usages: pd.DataFrame, pairs: pd.DataFrame, keys: np.ndarray, usage_rows: np.ndarray) -> str:
    """How many usable same-form pairs have different stored tokens, and how many of those differ by case only."""
    a, b = pairs["usage_a"].to_numpy(), pairs["usage_b"].to_numpy()
    usable = (usage_rows[a] >= 0) & (usage_rows[b] >= 0)
    differ = usable & (keys[a] != keys[b])
    form = usages["form"].to_numpy()
    by_case = differ & (form[a] != form[b])
    return (f"{int(differ.sum())} of {int(usable.sum())} usable pairs have different stored tokens "
            f"({int(by_case.sum())} written differently, e.g. by a capital letter)")


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
    words = _regression(rows, context.words, x, mean, std, context.occurrences, settings, context.note,
                        context.tagged)
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
    table = table.merge(by_form, on="form", how="left").sort_values("form").reset_index(drop=True)
    return table.assign(zipf=zipf_of(table["form"]), length=table["form"].str.len().astype(np.int64))


def _regression(rows: Rows, words: pd.DataFrame, x, mean, std, occurrences, settings: SenseSettings, note: str,
                tagged: pd.DataFrame):
    """P1: each form's self-similarity on log sense count, log frequency, context diversity and POS; then with
    general frequency and length too (the spec's version), and on the tagged content words."""
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
        _frequency_regressions(rows, table, tagged, kind, note)
    return words


def _frequency_regressions(rows: Rows, table: pd.DataFrame, tagged: pd.DataFrame, kind: str, note: str) -> None:
    """W4 as specified (issue 36): log senses beside log n, context diversity, Zipf frequency, length and POS, for
    every form (WordNet's morphy POS and sense count) and for the tagged content words (the tagger's POS and lemma)."""
    morphy = ("POS and sense count from WordNet's morphy over all parts of speech (no tagger); covariates log n, "
              "context diversity, Zipf frequency (wordfreq), length in characters, POS")
    content = table.drop(columns=["pos", "n_synsets"]).merge(
        tagged.rename(columns={"form": "word", "n_synsets_tagged": "n_synsets"})[["word", "pos", "pos_purity",
                                                                                 "n_synsets"]], on="word")
    content = content[(content["pos"] != "") & (content["pos_purity"] >= CONTENT_MIN_PURITY) & (content["n_synsets"] >= 1)]
    tagger_note = (f"content words only: POS and lemma from spaCy's en_core_web_sm 3.8.0 tagger, POS purity >= "
                   f"{CONTENT_MIN_PURITY}, WordNet senses of exactly (lemma, POS); covariates as the morphy version")
    for suffix, subset, what in (("frequency", table, morphy), ("content", content, tagger_note)):
        try:
            fit = polysemy.polysemy_regression(subset, covariates=FREQUENCY_COVARIATES).set_index("term")
        except ValueError as err:
            rows.add("polysemy", f"beta_log_synsets_{suffix}", kind, np.nan, n=len(subset), note=f"not measurable: {err}")
            continue
        n_words = int(fit["n_words"].iloc[0])
        terms = [("log_synsets", f"beta_log_synsets_{suffix}")]
        if suffix == "frequency":
            terms += [("zipf", "beta_zipf"), ("length", "beta_length"), ("context_diversity", "beta_context_diversity_frequency")]
        for term, measure in terms:
            rows.add("polysemy", measure, kind, fit.loc[term, "beta"], null=0.0,
                     ci=(fit.loc[term, "ci_low"], fit.loc[term, "ci_high"]), p=fit.loc[term, "p"], n=n_words,
                     note=f"{what}; {note}")


def _clusterability(rows: Rows, words: pd.DataFrame, x, mean, std, occurrences, settings: SenseSettings, seed: int,
                    note: str):
    """C1-C3: the cluster index of polysemous words against monosemous ones matched on STS and general frequency,
    and the positive control: pseudo-words made of two of those monosemous words, on the same statistic."""
    eligible = words[words["n_used"] >= settings.cluster_subsample].rename(columns={"form": "word", "n_used": "n"})
    by = ("n", "zipf") if "zipf" in eligible.columns else ("n",)
    matched = clusters.matched_mono_poly(eligible, per_group=settings.cluster_words, seed=seed, by=by,
                                         bins=4 if len(by) == 2 else 8)
    matching = "matched on STS count and Zipf frequency" if len(by) == 2 else "matched on STS count"
    chosen = occurrences[occurrences["form"].isin(matched["word"])].sort_values(["form", "row"], kind="stable")
    forms, starts = np.unique(chosen["form"].to_numpy(), return_index=True)
    rows_of = dict(zip(forms, np.split(chosen["row"].to_numpy(), starts[1:])))
    group = matched.set_index("word")["polysemy"]
    pseudo = clusters.pseudo_word_pairs(group.index[group == "mono"], seed=seed)
    shape = dict(m=settings.cluster_subsample, components=settings.cluster_components)
    for kind in PREPROCESSINGS:
        vectors = {word: preprocess(x[rows_of[word]], mean, std, kind) for word in matched["word"]}
        index = {word: clusters.word_cluster_index(vectors[word], subsamples=settings.cluster_subsamples,
                                                   seed=word_seed(seed, word), **shape) for word in matched["word"]}
        ci = pd.Series(index, dtype=np.float64)
        poly, mono = ci[group[ci.index] == "poly"].to_numpy(), ci[group[ci.index] == "mono"].to_numpy()
        pseudo_ci = np.array([clusters.pseudo_word_cluster_index(vectors[a], vectors[b],
                                                                 subsamples=settings.cluster_subsamples,
                                                                 seed=word_seed(seed, f"{a}+{b}"), **shape)
                              for a, b in pseudo])
        if len(poly) < 2 or len(mono) < 2:
            rows.add("clusterability", "delta_cluster_index", kind, np.nan, n=len(poly) + len(mono),
                     note="not measurable: fewer than 2 matched words in a group")
        else:
            contrast = clusters.cluster_contrast(poly, mono)
            rows.add("clusterability", "delta_cluster_index", kind, contrast["delta_ci"], null=0.0,
                     ci=(contrast["ci_low"], contrast["ci_high"]), p=contrast["mw_p"], n=len(poly) + len(mono),
                     note=f"polysemous minus monosemous words {matching}; {note}")
            rows.add("clusterability", "cluster_index_poly", kind, poly.mean(), null=mono.mean(), n=len(poly),
                     note="null: the matched monosemous words' mean")
        if len(pseudo_ci) >= 2 and len(mono) >= 2:
            contrast = clusters.cluster_contrast(pseudo_ci, mono)
            rows.add("clusterability", "delta_cluster_index_pseudo", kind, contrast["delta_ci"], null=0.0,
                     ci=(contrast["ci_low"], contrast["ci_high"]), p=contrast["mw_p"], n=len(pseudo_ci) + len(mono),
                     note=f"positive control: {len(pseudo_ci)} pseudo-words (two matched monosemous words each, half "
                          "of every subsample from each) minus the monosemous words; two-sided Mann-Whitney p")
        else:
            rows.add("clusterability", "delta_cluster_index_pseudo", kind, np.nan, n=len(pseudo_ci),
                     note="not measurable: fewer than 2 pseudo-words or monosemous words")
        if settings.cluster_null_draws:
            null = dict(draws=settings.cluster_null_draws, **shape)
            for measure, flags in (
                ("share_gaussian_null_rejected", [clusters.gaussian_null_p(vectors[w], seed=word_seed(seed, w), **null)
                                                  for w in ci.index[group[ci.index] == "poly"]]),
                ("share_gaussian_null_rejected_mono", [clusters.gaussian_null_p(vectors[w], seed=word_seed(seed, w),
                                                                                **null)
                                                       for w in ci.index[group[ci.index] == "mono"]]),
            ):  # fmt: skip
                if flags:
                    rows.add("clusterability", measure, kind, np.mean(np.array(flags) <= 0.05), null=0.05,
                             n=len(flags), note="Gaussian null of the same covariance, alpha 0.05 (conservative)")
        words = words.merge(ci.rename(f"cluster_index_{kind}").rename_axis("form").reset_index(), on="form", how="left")
    return words


def _separation(rows: Rows, context: SenseContext, stored: np.ndarray, mean, std) -> None:
    """A1-A3 on the WordNet usages: each usage's stored row, the same preprocessing as the STS layer; and what
    the cosine adds beyond the pairs' shape and beyond the layer-0 control (issue 36)."""
    present = context.usage_rows >= 0
    for kind in PREPROCESSINGS:
        vectors = np.full((len(context.usages), stored.shape[1]), np.nan)
        vectors[present] = preprocess(stored[context.usage_rows[present]], mean, std, kind)
        # the shape, same-token, stratified and per-lemma controls on centred vectors only (the claims' and the
        # figure's; they double the separation's time): standardised vectors keep the measures of before
        r = context.design.measure(vectors, control=context.control.get(kind), controls=kind == "centred")
        if rows.layer == 0:
            context.control[kind] = r["cosines"]
        _separation_rows(rows, r, kind, context.usage_note, context.token_note,
                         permutations=context.design.permutations, bootstrap=context.design.bootstrap)


def _separation_rows(rows: Rows, r: dict, kind: str, note: str, token_note: str, *, permutations: int,
                     bootstrap: int) -> None:
    """One layer's separation rows from ``SeparationDesign.measure``'s result (a missing key: NaN)."""
    def get(key):
        return r.get(key, np.nan)

    def ci(name):
        return get(f"{name}_ci_low"), get(f"{name}_ci_high")

    pairs = r["n_pairs_same"] + r["n_pairs_different"]
    boot = f"95% interval over {bootstrap} lemma resamples"
    measured = partial(rows.add, "separation", preprocessing=kind)

    def add(measure, *, value, **kw):  # a control not measured on these vectors gets no row
        if measure in CENTRED_ONLY and kind != "centred":
            return
        measured(measure, value=value, **kw)

    add("delta_within_between", value=r["delta"], null=r["delta_null_mean"], ci=(r["delta_ci_low"], r["delta_ci_high"]),
        p=r["delta_p"], n=r["n_words_delta"],
        note=f"{note}; p against {permutations} label permutations within word forms (floor {1 / (permutations + 1):.2g})")
    add("auroc_same_sense", value=r["auroc"], null=0.5, ci=ci("auroc"), n=pairs, note=f"{note}; {boot}")
    add("auroc_same_sense_coarse", value=r["auroc_coarse"], null=0.5, ci=ci("auroc_coarse"),
        n=r["n_pairs_same"] + r["n_pairs_coarse"], note=f"different-sense pairs whose lexicographer files differ; {boot}")
    add("auroc_same_token", value=get("auroc_same_token"), null=0.5, ci=ci("auroc_same_token"),
        n=get("n_pairs_same_token"), note=f"pairs of the same stored token sequence only: {token_note}")
    add("auroc_stratified", value=get("auroc_stratified"), null=0.5, ci=ci("auroc_stratified"), n=pairs,
        note=f"pairs compared within strata of the sentence-length difference (0 to {separation.LENGTH_STRATA_CAP}+ "
             f"words, {get('n_strata'):.0f} strata); {boot}")
    add("auroc_macro", value=get("auroc_macro"), null=0.5, ci=ci("auroc_macro"), n=get("n_lemmas_macro"),
        note=f"mean of each lemma's own AUROC (n: lemmas with both kinds of pair); {boot}")
    add("auroc_shape", value=get("auroc_shape"), null=0.5, ci=ci("auroc_shape"), n=pairs,
        note="no model: a logistic regression on the pair's sentence lengths and target positions, "
             f"held out by lemma ({separation.FOLDS}-fold GroupKFold); {boot}")
    add("auroc_cosine_shape", value=get("auroc_cosine_shape"), null=get("auroc_shape"), ci=ci("auroc_cosine_shape"),
        n=pairs, note=f"cosine + shape, the same held-out logistic regression; null: shape alone; {boot}")
    add("heldout_balanced_accuracy", value=get("heldout_balanced_accuracy"), null=0.5,
        ci=ci("heldout_balanced_accuracy"), n=pairs,
        note=f"same sense if cos >= t, t chosen on held-out lemmas ({separation.FOLDS}-fold GroupKFold, best training "
             f"balanced accuracy); {boot}")
    if rows.layer > 0:
        add("auroc_minus_layer0", value=get("control_difference"), null=0.0, ci=ci("control_difference"),
            p=get("control_difference_p"), n=pairs,
            note=f"AUROC here minus at layer 0 on the same pairs, paired bootstrap over {bootstrap} lemma resamples; "
                 f"p: share of resamples <= 0 (floor {1 / (bootstrap + 1):.2g})")
    add("knn_accuracy", value=r["knn_accuracy"], null=r["knn_majority"], ci=ci("knn"), n=r["n_knn"],
        note=f"null: leave-one-out majority sense; exact chance {r['knn_chance']:.3f}; ceiling "
             f"{r['knn_ceiling']:.3f}; {boot}")
    add("knn_chance", value=r["knn_chance"], n=r["n_knn"],
        note="exact chance of 1-NN under random labels within each word form: sum n_s(n_s - 1) / n(n - 1)")
    add("knn_ceiling", value=r["knn_ceiling"], n=r["n_knn"],
        note="the most 1-NN can reach: the share of usages whose sense has another usage of the same word form")


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
