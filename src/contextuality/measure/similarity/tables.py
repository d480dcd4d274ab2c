"""The similarity tables: one row per (layer pair, variant), within a model or across two.

Within a model every (ℓ, m) with ℓ ≤ m (the diagonal exactly CKA 1, angle 0); across two models every (ℓ of A,
m of B). Each row: biased and debiased CKA, the Procrustes angle and distance, mutual k-NN on the first
``knn_rows`` rows of the sample with its chance level k/(n−1), and, for each layer's best match by debiased CKA
(``best_for_a``: layer_b is layer_a's; ``best_for_b``: layer_a is layer_b's; within a model, a layer's best other
layer), a row-permutation null (``null_draws`` shuffles of B's rows against A's: the biased value's floor, the
debiased one's spread, and a p-value). With ``pairs: diagonal`` only each layer of A against B's layer at the
nearest relative depth (and B's against A's) is computed, and within a model each layer against the next and
the last: no best matches then.

The measures are the engine's (``measure.similarity.measures``); this module only schedules them and lays out the rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.settings import SimilaritySettings
from contextuality.measure.similarity import measures as engine
from contextuality.store.files import StoreError

TABLE_COLUMNS = [
    "corpus", "model_a", "layer_a", "depth_a", "model_b", "layer_b", "depth_b", "variant", "n",
    "cka_biased", "cka_debiased", "procrustes_angle", "procrustes_distance",
    "mutual_knn", "knn_n", "knn_k", "knn_chance",
    "null_biased_mean", "null_biased_sd", "null_debiased_mean", "null_debiased_sd", "p_perm",
    "best_for_a", "best_for_b", "note",
]  # fmt: skip
# similarity.pairs: every pair of layers, or each layer's nearest-depth partner (and within a model its neighbours)
PAIRS = ("all", "diagonal")
# The engine's measure names as the config names them (``procrustes`` gives both of its columns)
GRID_MEASURES = ("cka_biased", "cka_debiased", "procrustes")


def depth(layer: int, n_layers: int) -> float:
    """Relative depth ℓ/(L−1) (0 for a one-layer model)."""
    return layer / (n_layers - 1) if n_layers > 1 else 0.0


def nearest_layer(target_depth: float, n_layers: int) -> int:
    """The layer of a model of ``n_layers`` nearest to ``target_depth`` (the lower one on a tie)."""
    return int(np.argmin([abs(depth(layer, n_layers) - target_depth) for layer in range(n_layers)]))


def layer_pairs(n_a: int, n_b: int | None, pairs: str) -> list[tuple[int, int]]:
    """The (ℓ, m) a table holds: every pair (within: ℓ ≤ m), or the diagonal's."""
    if n_b is None:
        if pairs == "all":
            return [(a, b) for a in range(n_a) for b in range(a, n_a)]
        return sorted({(a, b) for a in range(n_a) for b in (a, min(a + 1, n_a - 1), n_a - 1)})
    if pairs == "all":
        return [(a, b) for a in range(n_a) for b in range(n_b)]
    return sorted({(a, nearest_layer(depth(a, n_a), n_b)) for a in range(n_a)}
                  | {(nearest_layer(depth(b, n_b), n_a), b) for b in range(n_b)})  # fmt: skip


def best_matches(grid: np.ndarray, within: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each row's and each column's argmax of ``grid`` (debiased CKA; NaN never wins; −1 when all are NaN);
    within a model a layer's best *other* layer."""
    values = np.array(grid, dtype=np.float64, copy=True)
    if within:
        np.fill_diagonal(values, np.nan)
    return _nan_argmax(values), _nan_argmax(values.T)


def _nan_argmax(values: np.ndarray) -> np.ndarray:
    if values.shape[1] == 0:
        return np.full(values.shape[0], -1)
    filled = np.where(np.isnan(values), -np.inf, values)
    best = np.argmax(filled, axis=1)
    return np.where(np.isnan(values).all(axis=1), -1, best)


def keep_mask(variant: str, layers_a: list, layers_b: list | None) -> np.ndarray | None:
    """The rows a variant measures: ``no_massive`` leaves out every row that carries a massive activation in a
    layer of either model; the others keep every row (None)."""
    if variant != "no_massive":
        return None
    carried = engine.massive_row_mask(layers_a)
    if layers_b is not None:
        carried = carried | engine.massive_row_mask(layers_b)
    return ~carried


def knn_rows_of(keep: np.ndarray | None, n_rows: int, knn_rows: int) -> tuple[int, np.ndarray | None]:
    """(how many leading sample rows hold the first ``knn_rows`` kept rows, their keep mask)."""
    if keep is None:
        return min(knn_rows, n_rows), None
    kept = np.flatnonzero(keep)
    if len(kept) <= knn_rows:
        return n_rows, keep
    stop = int(kept[knn_rows - 1]) + 1
    return stop, keep[:stop]


def knn_of_layers(layers: list, variant: str, keep, settings: SimilaritySettings) -> list[np.ndarray] | None:
    """Each layer's k nearest neighbours (cosine, the variant's centred rows) among the k-NN sample, or None
    when the measure is off or the sample is too small."""
    if "mutual_knn" not in settings.measures:
        return None
    stop, knn_keep = knn_rows_of(keep, layers[0].shape[0], settings.knn_rows)
    n_knn = stop if knn_keep is None else int(knn_keep.sum())
    if n_knn <= settings.knn_k:
        return None
    return [engine.knn_indices(layer[:stop], settings.knn_k, variant=variant, keep=knn_keep) for layer in layers]


def variant_rows(
    layers_a: list,
    layers_b: list | None,
    *,
    variant: str,
    settings: SimilaritySettings,
    seed: int,
    memory_mb: int,
    knn_a: list | None,
    knn_b: list | None,
    keep: np.ndarray | None,
) -> pd.DataFrame:
    """One variant's rows of a table (within when ``layers_b`` is None); ``knn_a``/``knn_b``: each layer's
    neighbours under this variant (None: no mutual k-NN)."""
    within = layers_b is None
    n_a, n_b = len(layers_a), len(layers_a if within else layers_b)
    pairs = layer_pairs(n_a, None if within else n_b, settings.pairs)
    grid = _grid(layers_a, layers_b, pairs, variant=variant, keep=keep, settings=settings, memory_mb=memory_mb)
    table = pd.DataFrame(pairs, columns=["layer_a", "layer_b"])
    a, b = table["layer_a"].to_numpy(), table["layer_b"].to_numpy()
    table["variant"], table["n"] = variant, int(grid.n)
    for column in ("cka_biased", "cka_debiased", "procrustes_angle", "procrustes_distance"):
        table[column] = getattr(grid, column)[a, b]
    table["note"] = [grid.notes.get((int(x), int(y)), "") for x, y in zip(a, b)]
    table = _with_knn(table, knn_a, knn_a if within else knn_b, settings)
    if settings.pairs == "all":
        best_a, best_b = best_matches(grid.cka_debiased, within)
        table["best_for_a"] = (best_a[a] == b).astype(int) & (a != b if within else True)
        table["best_for_b"] = (best_b[b] == a).astype(int) & (a != b if within else True)
    else:
        table["best_for_a"] = table["best_for_b"] = 0
    return _with_null(table, layers_a, layers_a if within else layers_b, variant=variant, keep=keep,
                      settings=settings, seed=seed, memory_mb=memory_mb)  # fmt: skip


def _grid(layers_a, layers_b, pairs, *, variant, keep, settings, memory_mb):
    """The engine's grid over every pair, or (``pairs: diagonal``) pair by pair into a grid of NaN elsewhere.
    Mutual k-NN is not the grid's: its neighbours are found once per layer (``knn_of_layers``) and reused."""
    measures = tuple(measure for measure in GRID_MEASURES if measure in settings.measures)
    options = dict(variant=variant, keep=keep, measures=measures, compute_dtype=settings.compute_dtype,
                   chunk_rows=settings.chunk_rows, memory_mb=memory_mb)  # fmt: skip
    if settings.pairs == "all":
        return engine.layer_grid(layers_a, layers_b, **options)
    others = layers_a if layers_b is None else layers_b
    grid = None
    for a, b in pairs:
        # a layer with itself is the within grid of one layer: exactly 1 and 0
        single = engine.layer_grid([layers_a[a]], None if layers_b is None and a == b else [others[b]], **options)
        grid = grid or engine.Grid.empty((len(layers_a), len(others)), single.n)
        for name in ("cka_biased", "cka_debiased", "procrustes_angle", "procrustes_distance"):
            getattr(grid, name)[a, b] = getattr(single, name)[0, 0]
        if single.notes:
            grid.notes[(a, b)] = "; ".join(single.notes.values())
    return grid


def _with_knn(table: pd.DataFrame, knn_a, knn_b, settings: SimilaritySettings) -> pd.DataFrame:
    if knn_a is None or knn_b is None:
        table["mutual_knn"], table["knn_n"], table["knn_k"], table["knn_chance"] = np.nan, 0, settings.knn_k, np.nan
        return table
    n = len(knn_a[0])
    table["mutual_knn"] = [engine.mutual_knn(knn_a[x], knn_b[y]) for x, y in zip(table["layer_a"], table["layer_b"])]
    table["knn_n"], table["knn_k"], table["knn_chance"] = n, settings.knn_k, settings.knn_k / (n - 1)
    return table


def _with_null(table, layers_a, layers_b, *, variant, keep, settings: SimilaritySettings, seed: int, memory_mb: int):
    """The permutation null of every best-match row (NaN elsewhere, or with ``null_draws: 0``)."""
    for column in ("null_biased_mean", "null_biased_sd", "null_debiased_mean", "null_debiased_sd", "p_perm"):
        table[column] = np.nan
    if not settings.null_draws:
        return table
    best = (table["best_for_a"] == 1) | (table["best_for_b"] == 1)
    for i in np.flatnonzero(best.to_numpy()):
        a, b = int(table.at[i, "layer_a"]), int(table.at[i, "layer_b"])
        stream = np.random.SeedSequence([seed, a, b, sorted(engine.VARIANTS).index(variant)])
        null = engine.permutation_null(
            layers_a[a], layers_b[b], draws=settings.null_draws, seed=int(stream.generate_state(1)[0]),
            variant=variant, keep=keep, compute_dtype=settings.compute_dtype, chunk_rows=settings.chunk_rows,
            memory_mb=memory_mb,
        )  # fmt: skip
        table.loc[i, ["null_biased_mean", "null_biased_sd", "null_debiased_mean", "null_debiased_sd"]] = [
            null.biased_mean, null.biased_sd, null.debiased_mean, null.debiased_sd]  # fmt: skip
        table.at[i, "p_perm"] = engine.p_value(table.at[i, "cka_debiased"], null.debiased)
    return table


def finish_table(
    parts: list[pd.DataFrame], *, corpus: str, model_a: str, n_a: int, model_b: str, n_b: int
) -> pd.DataFrame:
    """The variants' rows as one table in TABLE_COLUMNS order, sorted by variant, layer_a, layer_b."""
    table = pd.concat(parts, ignore_index=True)
    table["corpus"], table["model_a"], table["model_b"] = corpus, model_a, model_b
    table["depth_a"] = [depth(int(layer), n_a) for layer in table["layer_a"]]
    table["depth_b"] = [depth(int(layer), n_b) for layer in table["layer_b"]]
    table = table.sort_values(["variant", "layer_a", "layer_b"], kind="stable").reset_index(drop=True)
    return table[TABLE_COLUMNS]


def write_table(table: pd.DataFrame, path: Path) -> None:
    """A table as CSV (every float with 17 significant digits: the same values give the same bytes)."""
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.17g")


def read_table(path: str | Path) -> pd.DataFrame:
    """A similarity table, checked: its columns are ``TABLE_COLUMNS`` and every value is in its range (CKA in
    [0, 1] biased, at most 1 debiased; angle in [0, π/2]; mutual k-NN in [0, 1])."""
    try:
        table = pd.read_csv(path, keep_default_na=False, na_values=["", "NaN", "nan"])
    except (OSError, ValueError) as err:
        raise StoreError(f"{path}: not a readable table ({err}); delete it and rerun snakemake") from None
    if list(table.columns) != TABLE_COLUMNS:
        raise StoreError(f"{path}: its columns are not the similarity table's ({', '.join(TABLE_COLUMNS)}); "
                         "delete it and rerun snakemake")  # fmt: skip
    ranges = {"cka_biased": (-1e-9, 1 + 1e-9), "cka_debiased": (-np.inf, 1 + 1e-9),
              "procrustes_angle": (0, np.pi / 2 + 1e-9), "mutual_knn": (0, 1), "p_perm": (0, 1)}  # fmt: skip
    for column, (low, high) in ranges.items():
        values = table[column].to_numpy(float)
        bad = np.flatnonzero(~np.isnan(values) & ((values < low) | (values > high)))
        if len(bad):
            raise StoreError(f"{path}:{bad[0] + 2}: {column} {values[bad[0]]} is outside [{low:g}, {high:g}]; delete "
                             "the table and rerun snakemake")  # fmt: skip
    return table
