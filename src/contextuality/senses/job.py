"""The ``measure_senses`` job: every layer of one model, every sense measure, each layer file read once.

The STS layer gives the polysemy regression (P1), the clusterability contrast (C1-C3) and the output-layer
measures (B1-B5); the WordNet usages' layer gives the labelled sense separation (A1-A3, C5). Each measure is
computed on centred and on standardised vectors (the layer's mean and per-dimension standard deviation over
the STS occurrences the measures use: for a decoder, not its sentence-initial rows), so that the anisotropy and the rogue dimensions do not dominate every cosine; the
output layer is read on the hidden states themselves, as the model does. Occurrences at a sentence's first
word are left out where a decoder has no left context there (counted in the rows' ``note``).

Output: ``rows`` (long format: one row per measure and preprocessing, with its null, interval, p and count) and
``words`` (one row per word form of the STS index with a WordNet entry: its per-layer values). The measures
themselves: ``sts.measures`` (P1, W4, C1-C3), ``output.layer`` (B1-B5, ``output.masked``), ``separation.rows`` (A1-A3).
From the store each layer is read here (``measure_layer``); on the device path (``metrics.on_device``) the job's
own forward passes make it (``senses.device``), and the same per-layer measures take its rows
(``measure_layer_rows``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.settings import SENSE_LAYER_DTYPE, SenseSettings
from contextuality.models.kind import is_decoder, model_type_of
from contextuality.senses.lexicon import tagger
from contextuality.senses.lexicon.frequency import zipf_of
from contextuality.senses.output.layer import output_layer_rows, prepare_output
from contextuality.senses.rows import Rows
from contextuality.senses.separation.design import SeparationDesign
from contextuality.senses.separation.rows import separation_rows
from contextuality.senses.separation.split_control import SplitControl, two_sense_sets
from contextuality.senses.sts.measures import BLOCK_ROWS, clusterability_rows, regression_rows
from contextuality.senses.vectors import layer_moments
from contextuality.store.files import StoreError
from contextuality.store.reader import LayerReader, check_layer, read_manifest

log = logging.getLogger(__name__)

# The per-word table's columns, whatever a model lacks (no output layer: no alignment ranks)
WORD_COLUMNS = [
    "model",
    "layer",
    "form",
    "n_used",
    "n_synsets",
    "pos",
    "polysemy",
    "context_diversity",
    "zipf",
    "length",
    "self_similarity_centred",
    "self_similarity_standardised",
    "cluster_index_centred",
    "cluster_index_standardised",
    "alignment_rank",
    "alignment_null_rank",
]


@dataclass(frozen=True, kw_only=True)
class SensePaths:
    """The files one ``measure_senses`` job reads (the rule's named inputs). From the store: every layer of both
    corpora with their manifests; on the device path (``senses.device``) none of those, the job computing the
    layers from the model and both corpora's plans (``tokens``, ``units``, ``senses_tokens``, ``senses_units``)."""

    occurrences: Path
    units: Path
    tokens: Path
    spacy_words: Path
    inventory: Path
    diversity: Path
    tagged_forms: Path
    usages: Path
    pairs: Path
    senses_units: Path
    senses_tokens: Path
    senses_spacy_words: Path
    model: Path
    record: Path
    layers: list[Path] = field(default_factory=list)  # the STS corpus's layer files, layer 0 first
    manifest: Path | None = None
    senses_layers: list[Path] = field(default_factory=list)  # the usages' layer files, the same layers
    senses_manifest: Path | None = None


@dataclass(frozen=True)
class SenseJob:
    """What one ``measure_senses`` job is given, from the store or on the device path (``senses.device``): its
    files, settings, seed and model, the loader of the model's output head, and its threads (torch's, BLAS and
    OpenMP)."""

    paths: SensePaths
    settings: SenseSettings
    seed: int
    model: str
    head_loader: object = None
    threads: int = 1


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
    tokens: object  # output_layer.OutputTokens: the occurrences' tokens, B4/B5's tokens, a masked LM's passes
    usages: pd.DataFrame
    usage_rows: np.ndarray
    usage_note: str
    design: object
    token_note: str = ""
    control: dict = None  # layer 0's pair cosines per preprocessing (the paired bootstrap's control)
    split: object = None  # W3b's two-senses control (split_control.SplitControl)


# --------------------------------------------------------------------------------------------------
# The STS corpus's occurrences, as the sense measures use them


def sts_occurrences(
    occurrences: pd.DataFrame, units: pd.DataFrame, spacy_words: pd.DataFrame, *, decoder: bool
) -> tuple[pd.DataFrame, dict]:
    """The indexed occurrences whose stored unit is the whole spaCy word, with their lower-cased form.

    A subword model's piece ``bank`` also occurs inside longer words: only units whose word *is* the piece
    count (spec pitfall 8). A decoder's occurrences at a sentence's first word have no left context and are
    left out. Returns the table (``row``, ``form``, ``word``, ``sentence_id``, ``word_position``, ``token_first``,
    ``token_last``) and the counts left out.
    """
    joined = occurrences[["word", "row"]].merge(
        units[["row", "sentence_id", "word_position", "unit", "token_first", "token_last"]], on="row", how="left"
    )
    joined = joined.merge(
        spacy_words[["sentence_id", "position", "word"]].rename(
            columns={"position": "word_position", "word": "spacy_word"}
        ),
        on=["sentence_id", "word_position"],
        how="left",
    )
    whole = joined["unit"].str.lower() == joined["spacy_word"].str.lower()
    initial = joined["word_position"] == 0
    keep = whole & ~(initial & decoder)
    counts = {"not_whole_word": int((~whole).sum()), "sentence_initial": int((whole & initial & decoder).sum())}
    table = joined[keep].assign(form=lambda t: t["spacy_word"].str.lower())
    columns = ["row", "form", "word", "sentence_id", "word_position", "token_first", "token_last"]
    return table[columns].reset_index(drop=True), counts


# --------------------------------------------------------------------------------------------------
# The job


def measure_senses(job: SenseJob, *, progress=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every sense measure of every layer of one model: the long ``rows`` table and the per-word table.

    One job per model: the imports, the output head, the tables and the separation design's permutations are
    prepared once, then each layer of both corpora is read once. ``progress``: wraps the layers' range.
    """
    import torch
    from threadpoolctl import threadpool_limits

    paths, settings, seed, model, threads = job.paths, job.settings, job.seed, job.model, job.threads
    if len(paths.layers) != len(paths.senses_layers):
        raise StoreError(
            f"{len(paths.layers)} STS layer files but {len(paths.senses_layers)} of the usages' corpus; "
            "rerun snakemake so that both stores hold every layer"
        )
    torch.set_num_threads(max(1, threads))
    with threadpool_limits(limits=threads):
        context = prepare(paths, settings, seed=seed, head_loader=job.head_loader)
        manifests = read_manifest(paths.manifest), read_manifest(paths.senses_manifest)
        tables = [
            measure_layer(context, layer, paths, manifests, settings, seed=seed, model=model)
            for layer in (progress or (lambda layers: layers))(range(len(paths.layers)))
        ]
    rows = pd.concat([table for table, _ in tables], ignore_index=True)
    words = pd.concat([table for _, table in tables], ignore_index=True)
    return rows, words


def prepare(paths: SensePaths, settings: SenseSettings, *, seed: int, head_loader=None) -> SenseContext:
    """The model's shared tables (see SenseContext)."""
    decoder = is_decoder(model_type_of(paths.model))
    occurrences, dropped = sts_occurrences(
        pd.read_parquet(paths.occurrences),
        pd.read_parquet(paths.units),
        pd.read_parquet(paths.spacy_words),
        decoder=decoder,
    )
    note = (
        f"{dropped['sentence_initial']} sentence-initial occurrences left out (decoder)"
        if decoder
        else "encoder: sentence-initial occurrences kept"
    )
    words = _word_table(occurrences, pd.read_parquet(paths.inventory), pd.read_parquet(paths.diversity))
    tagged = pd.read_parquet(paths.tagged_forms)
    missing = sorted(set(tagger.FORM_COLUMNS) - set(tagged.columns))
    if missing:
        raise StoreError(
            f"{paths.tagged_forms}: lacks columns {missing}; rerun snakemake so that rule sense_tags writes it again"
        )
    head, reason = head_loader() if head_loader is not None else (None, "no output head was loaded")
    # B1-B5's tokens and samples (and a masked LM's passes with a word masked), once for every layer
    tokens = (
        prepare_output(pd.read_parquet(paths.tokens), occurrences, head, settings, seed) if head is not None else None
    )
    usages, units = pd.read_parquet(paths.usages), pd.read_parquet(paths.senses_units)
    usage_rows = usage_row_numbers(usages, units)
    unstored, initial = int((usage_rows < 0).sum()), usages["position"].to_numpy() == 0
    if decoder:
        usage_rows = np.where(initial, -1, usage_rows)
    usage_note = (
        f"{int(initial.sum())} sentence-initial usages left out (decoder)"
        if decoder
        else "encoder: sentence-initial usages kept"
    ) + f"; {unstored} usages not stored as one unit"
    pairs = pd.read_parquet(paths.pairs)
    token_keys = usage_token_keys(usage_row_numbers(usages, units), units, pd.read_parquet(paths.senses_tokens))
    design = SeparationDesign(
        usages,
        pairs,
        permutations=settings.permutations,
        bootstrap=settings.bootstrap,
        seed=seed,
        lengths=sentence_lengths(usages, pd.read_parquet(paths.senses_spacy_words)),
        token_keys=token_keys,
    )
    return SenseContext(
        decoder,
        occurrences,
        note,
        words,
        tagged,
        head,
        reason,
        tokens,
        usages,
        usage_rows,
        usage_note,
        design,
        token_note=_token_note(usages, pairs, token_keys, usage_rows),
        control={},
        split=SplitControl(
            two_sense_sets(usages, usage_rows, token_keys),
            settings.cluster_subsamples,
            settings.cluster_components,
            seed,
        ),
    )


def sentence_lengths(usages: pd.DataFrame, spacy_words: pd.DataFrame) -> np.ndarray:
    """Each usage's sentence length in spaCy words (punctuation included), for the shape baselines."""
    lengths = spacy_words.groupby("sentence_id").size()
    found = lengths.reindex(usages["sentence_id"].to_numpy())
    if found.isna().any():
        raise StoreError(
            f"{int(found.isna().sum())} usages name a sentence the usages' spaCy words lack; rerun "
            "snakemake so that rule sense_usages writes both together"
        )
    return found.to_numpy(np.int64)


def usage_token_keys(usage_rows: np.ndarray, units: pd.DataFrame, tokens: pd.DataFrame) -> np.ndarray:
    """An integer per usage naming the token sequence of its stored unit (-1: no stored unit): two usages with
    the same key are the same input to the model's embedding layer."""
    ids = tokens.set_index("sentence_id")["input_ids"]
    unit = units.set_index("row").loc[usage_rows[usage_rows >= 0], ["sentence_id", "token_first", "token_last"]]
    pieces = [
        tuple(np.asarray(ids.loc[sentence])[first : last + 1].tolist())
        for sentence, first, last in unit.itertuples(index=False)
    ]
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
    return (
        f"{int(differ.sum())} of {int(usable.sum())} usable pairs have different stored tokens "
        f"({int(by_case.sum())} written differently, e.g. by a capital letter)"
    )


def measure_layer(
    context: SenseContext, layer: int, paths: SensePaths, manifests, settings: SenseSettings, *, seed: int, model: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One layer's rows and words from the store: the STS layer and the usages' layer, each checked against its
    manifest and read once, one at a time (the STS layer is let go before the usages' is read)."""
    rows = Rows(model, layer)
    check_layer(paths.layers[layer], manifests[0], layer)
    check_layer(paths.senses_layers[layer], manifests[1], layer)
    with LayerReader(paths.layers[layer], manifests[0]) as reader:
        x = reader.rows(dtype=SENSE_LAYER_DTYPE)
        after_final_norm = bool(int(reader.handle.attrs.get("after_final_norm", 0)))
    words, mean, std = sts_layer_rows(context, rows, x, after_final_norm, settings, seed=seed)
    del x
    with LayerReader(paths.senses_layers[layer], manifests[1]) as reader:
        stored = reader.rows(dtype=SENSE_LAYER_DTYPE)
    separation_rows(rows, context, stored, mean, std)
    return rows.frame(), words.assign(model=model, layer=layer).reindex(columns=WORD_COLUMNS)


def measure_layer_rows(
    context: SenseContext,
    layer: int,
    x: np.ndarray,
    after_final_norm: bool,
    usage_x: np.ndarray,
    settings: SenseSettings,
    *,
    seed: int,
    model: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One layer's rows and words from its rows in memory (the device path): ``x`` the STS layer's rows and
    ``usage_x`` the usages' layer's, each float32 (``SENSE_LAYER_DTYPE``) in storage order, as the store holds them;
    ``after_final_norm`` as the store's layer file records it."""
    rows = Rows(model, layer)
    words, mean, std = sts_layer_rows(context, rows, x, after_final_norm, settings, seed=seed)
    separation_rows(rows, context, usage_x, mean, std)
    return rows.frame(), words.assign(model=model, layer=layer).reindex(columns=WORD_COLUMNS)


def sts_layer_rows(
    context: SenseContext, rows: Rows, x: np.ndarray, after_final_norm: bool, settings: SenseSettings, *, seed: int
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The STS layer's measures (P1, W4, C1-C3, B1-B5) into ``rows``: returns the per-word table and the moments
    (mean, standard deviation) of the rows the measures use, which the usages' separation measures share."""
    # the moments of the rows the measures use: a decoder's sentence-initial rows (its attention sink, with
    # activations 1,000 times the median in SmolLM2) would shift the mean so far that every centred vector
    # points one way (spec pitfall 3)
    used = context.occurrences["row"].to_numpy()
    mean, std = layer_moments(x[used[first : first + BLOCK_ROWS]] for first in range(0, len(used), BLOCK_ROWS))
    words = regression_rows(
        rows, context.words, x, mean, std, context.occurrences, settings, context.note, context.tagged
    )
    words = clusterability_rows(
        rows, words, x, mean, std, context.occurrences, settings, seed, context.note, split=context.split
    )
    words = output_layer_rows(
        rows,
        words,
        x,
        context.occurrences,
        context.tokens,
        context.head,
        context.head_reason,
        settings,
        seed,
        after_final_norm=after_final_norm,
    )
    return words, mean, std


def _word_table(occurrences: pd.DataFrame, inventory: pd.DataFrame, diversity: pd.DataFrame) -> pd.DataFrame:
    """One row per form with a WordNet entry: occurrences used, sense counts, POS, context diversity."""
    counts = occurrences.groupby("form").size().rename("n_used").reset_index()
    table = counts.merge(inventory[["form", "n_synsets", "pos", "polysemy"]], on="form", how="inner")
    # a form's diversity: its casings' values weighted by their occurrences
    weighted = diversity.assign(
        form=diversity["word"].str.lower(),
        weighted=diversity["context_diversity"] * diversity["n"],
        weight=diversity["n"].where(diversity["context_diversity"].notna(), 0),
    )
    sums = weighted.groupby("form")[["weighted", "weight"]].sum(min_count=1)
    by_form = (sums["weighted"] / sums["weight"].where(sums["weight"] > 0)).rename("context_diversity").reset_index()
    table = table.merge(by_form, on="form", how="left").sort_values("form").reset_index(drop=True)
    return table.assign(zipf=zipf_of(table["form"]), length=table["form"].str.len().astype(np.int64))


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
