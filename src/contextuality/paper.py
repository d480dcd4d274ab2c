"""Everything the paper reports, as data (Ethayarajh, EMNLP 2019): its models and checkpoints, the
per-layer reference numbers, Table 1, the claims, and the titles and y ranges of its figures.

This module imports nothing from the rest of the package (it is at the bottom of the import order) and
loads no pandas: the Snakefile imports it.

Per-layer values come from the statistics files the author released with the paper's code
(github.com/kawine/contextual). They are close to, but not exactly, what the paper's figures show, so ``reference_value``
marks them approximate. The one value the paper states in its text (ELMo's input layer has
self-similarity 1) is marked exact. Column names match ``results/metrics/{corpus}/{model}/layers.parquet`` so a
run's table and the paper's line up by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PAPER_MODELS = ("elmo", "bert", "gpt2")

PAPER_LABELS = {"elmo": "ELMo", "bert": "BERT", "gpt2": "GPT-2"}

PAPER_CHECKPOINTS = {
    "elmo": "elmo_2x4096_512_2048cnn_2xhighway",
    "bert": "bert-base-cased",
    "gpt2": "gpt2, the small GPT-2",
}

# Number of contextual layers; layer 0 (the input embedding) comes on top.
PAPER_DEPTH = {"elmo": 2, "bert": 12, "gpt2": 12}

# The fewest vectors the sampled baselines are reported from. Pairs are drawn with replacement, as the paper's
# code draws them, so 1/n of them pair a vector with itself (cosine 1) and the estimate is biased up
# by (1 - b)/n: at most 0.01 from 100 vectors (0.001 from the paper's 1,000), but 1.000 from one sentence's. Below
# it a layer's sampled baselines (and the values adjusted by them) are N/A; the claims take the exact ones.
MIN_BASELINE_VECTORS = 100


# The paper's own checkpoints as a run's config names them (config/paper.yaml): BERT and GPT-2 by
# their hub ids (and the legacy aliases the hub redirects to the same repository) at the pinned commits, ELMo by
# its official files on either AllenNLP host. A name alone proves nothing: any folder or fine-tuned copy can be
# called `gpt2`. No digest of these weights is recorded in the spec, so none is compared.
PAPER_HUB = {
    "bert": (frozenset({"google-bert/bert-base-cased", "bert-base-cased"}), "cd5ef92a9fb2f889e972770a36d4ed042daf221e"),
    "gpt2": (frozenset({"openai-community/gpt2", "gpt2"}), "607a30d783dfa663caf39e06633721c8d4cfcd7e"),
}
_ELMO_FOLDERS = tuple(
    f"{host}/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_"
    for host in ("https://s3-us-west-2.amazonaws.com/allennlp", "https://allennlp.s3.amazonaws.com")
)
PAPER_ELMO_FILES = {
    "options": frozenset(f"{folder}options.json" for folder in _ELMO_FOLDERS),
    "weights": frozenset(f"{folder}weights.hdf5" for folder in _ELMO_FOLDERS),
}


def is_paper_checkpoint(paper_model: str, identity: Mapping[str, str | None] | None) -> bool:
    """Whether a model's identity (its ``source`` and the config entries that name its weights, as the workflow
    passes them: ``id`` and ``revision``, ``options`` and ``weights``, ...) is the paper's own checkpoint."""
    identity = identity or {}
    source = identity.get("source")
    if paper_model in PAPER_HUB and source == "hub":
        ids, revision = PAPER_HUB[paper_model]
        return identity.get("id") in ids and identity.get("revision") == revision
    if paper_model == "elmo" and source == "elmo":
        return all(identity.get(name) in files for name, files in PAPER_ELMO_FILES.items())
    return False


# The paper's y ranges and titles (visualize.py), keyed by figure name.
AXIS_RANGES = {
    "anisotropy": (0.0, 1.0),
    "self_similarity": (0.0, 1.0),
    "intra_sentence": (-0.1, 0.5),
    "mev": (0.0, 0.1),
}

TITLES = {
    "anisotropy": "Average Cosine Similarity between Randomly Sampled Words",
    "self_similarity": "Average Self-Similarity (anisotropy-adjusted)",
    "intra_sentence": "Average Intra-Sentence Similarity (anisotropy-adjusted)",
    "mev": "Average Maximum Explainable Variance (anisotropy-adjusted)",
}
# The paper's Figures 1-4, by the name of their files (results/figures/{name}.png)
FIGURES = tuple(TITLES)

# [STATS] per-layer values; the list index is the layer. None = not reported.
_RELEASED: dict[str, dict[str, list[float | None]]] = {
    "baseline_cosine": {
        "elmo": [0.008, 0.157, 0.136],
        "bert": [0.105, 0.168, 0.219, 0.245, 0.327, 0.377, 0.420, 0.398, 0.399, 0.484, 0.561, 0.675, 0.477],
        "gpt2": [0.611, 0.644, 0.597, 0.614, 0.587, 0.573, 0.578, 0.582, 0.595, 0.617, 0.667, 0.758, 0.978],
    },
    "self_similarity": {
        "elmo": [1.000, 0.744, 0.642],
        "bert": [0.954, 0.921, 0.871, 0.823, 0.798, 0.781, 0.765, 0.744, 0.731, 0.754, 0.782, 0.839, 0.755],
        "gpt2": [0.917, 0.921, 0.900, 0.908, 0.884, 0.865, 0.850, 0.842, 0.838, 0.840, 0.852, 0.887, 0.985],
    },
    "intra_sentence": {
        "elmo": [0.318, 0.582, 0.621],
        "bert": [0.435, 0.522, 0.570, 0.590, 0.642, 0.695, 0.726, 0.711, 0.720, 0.771, 0.820, 0.870, 0.776],
        "gpt2": [0.808, 0.825, 0.583, 0.549, 0.537, 0.559, 0.586, 0.614, 0.635, 0.658, 0.693, 0.768, 0.990],
    },
    "mev": {
        "elmo": [None, 0.033, 0.039],
        "bert": [None, 0.010, 0.015, 0.020, 0.023, 0.024, 0.025, 0.028, 0.029, 0.026, 0.023, 0.026, 0.040],
        "gpt2": [None, 0.160, 0.286, 0.302, 0.301, 0.300, 0.297, 0.299, 0.302, 0.308, 0.308, 0.351, 0.713],
    },
    "baseline_mev": {
        "elmo": [0.087, 0.003, 0.004],
        "bert": [0.039, 0.025, 0.017, 0.012, 0.014, 0.012, 0.012, 0.010, 0.012, 0.015, 0.022, 0.040, 0.009],
        "gpt2": [0.062, 0.298, 0.969, 0.998, 0.998, 0.997, 0.997, 0.996, 0.995, 0.994, 0.992, 0.985, 0.829],
    },
}
# The anisotropy-adjusted values: the statistic less its baseline, which is what the released files hold to their
# three decimals (each of them): adjusted quantity -> (statistic, baseline).
_ADJUSTED = {
    "adjusted_self_similarity": ("self_similarity", "baseline_cosine"),
    "adjusted_intra_sentence": ("intra_sentence", "baseline_cosine"),
    "adjusted_mev": ("mev", "baseline_mev"),
}


def _less_baseline(quantity: str, baseline: str) -> dict[str, list[float | None]]:
    return {
        model: [
            None if value is None else round(value - base, 3) for value, base in zip(values, _RELEASED[baseline][model])
        ]
        for model, values in _RELEASED[quantity].items()
    }


# every quantity, in the order of the released files
QUANTITIES = (
    "baseline_cosine",
    "self_similarity",
    "adjusted_self_similarity",
    "intra_sentence",
    "adjusted_intra_sentence",
    "mev",
    "baseline_mev",
    "adjusted_mev",
)
_STATS = {name: _RELEASED[name] if name in _RELEASED else _less_baseline(*_ADJUSTED[name]) for name in QUANTITIES}

# Values the paper states in its text (not read off [STATS]): (quantity, model, layer).
_EXACT = {("self_similarity", "elmo", 0)}


def reference_value(paper_model: str, quantity: str, layer: int) -> tuple[float, bool] | None:
    """The paper's value for one model, quantity and layer as ``(value, approximate)``, or None."""
    values = _STATS.get(quantity, {}).get(paper_model)
    if values is None or not 0 <= layer < len(values) or values[layer] is None:
        return None
    return float(values[layer]), (quantity, paper_model, layer) not in _EXACT


# Table 1: the word benchmarks in the paper's column order, their column headers as the paper
# prints them, and its scores: method label -> task -> value.
TABLE1_TASKS = ("SimLex999", "MEN", "WS353", "RW", "Google", "MSR", "SemEval2012_2", "BLESS", "AP")
TABLE1_HEADERS = {task: task for task in TABLE1_TASKS} | {"SemEval2012_2": "SemEval2012(2)"}
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


@dataclass(frozen=True)
class Claim:
    """One checkable statement of the paper.

    ``about`` lists the paper models it is stated for; empty means every model.
    """

    id: str
    text: str
    about: tuple[str, ...]
    source: str


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "A1a",
        "ELMo's input layer (layer 0) is nearly isotropic: baseline cosine below 0.05.",
        ("elmo",),
        "§4.1, Fig. 1",
    ),
    Claim(
        "A1b", "Every layer except ELMo's input layer is anisotropic: baseline cosine above 0.1.", (), "§4.1, Fig. 1"
    ),
    Claim(
        "A2",
        "GPT-2's baseline cosine is 0.5-0.7 in layers 2-8, rises monotonically from layer 8 to 12 "
        "and exceeds 0.95 at layer 12.",
        ("gpt2",),
        "§4.1, Fig. 1",
    ),
    Claim(
        "A3",
        "BERT's penultimate layer is much more anisotropic than its last: baseline at layer 11 "
        "exceeds layer 12 by more than 0.1.",
        ("bert",),
        "§4.1, Fig. 1",
    ),
    Claim("A4", "ELMo's input layer has raw self-similarity 1.0 (within 0.001).", ("elmo",), "§4.2, Fig. 2"),
    Claim("A5a", "Adjusted self-similarity is lower in the top layer than in layer 1.", (), "§4.2, Fig. 2"),
    Claim(
        "A5b",
        "GPT-2's last layer is almost maximally context-specific: adjusted self-similarity below 0.05.",
        ("gpt2",),
        "§4.2, Fig. 2",
    ),
    Claim(
        "A6",
        "ELMo's five words with the lowest self-similarity (averaged over layers) include most of "
        "{and, of, 's, the, to}.",
        ("elmo",),
        "§4.2",
    ),
    Claim(
        "A7a",
        "ELMo's adjusted intra-sentence similarity rises with depth: layer 0 < layer 1 < layer 2.",
        ("elmo",),
        "§4.2, Fig. 3",
    ),
    Claim("A7b", "BERT's adjusted intra-sentence similarity is above 0 in every layer.", ("bert",), "§4.2, Fig. 3"),
    Claim(
        "A7c",
        "GPT-2's adjusted intra-sentence similarity is within ±0.07 of 0 in layers 2-12, "
        "and layer 0 has the largest value.",
        ("gpt2",),
        "§4.2, Fig. 3",
    ),
    Claim(
        "A8a", "Raw MEV averages below 0.05 in every layer (≥ 1) of ELMo and BERT.", ("elmo", "bert"), "§4.3, Fig. 4"
    ),
    Claim("A8b", "GPT-2's raw MEV averages about 0.30 (0.2-0.4) over layers 2-11.", ("gpt2",), "§4.3, Fig. 4"),
    Claim(
        "A9a",
        "Table 1: BERT's first two layers give the best static embeddings on SimLex999, RW, Google, MSR and "
        "SemEval2012(2) (the best of its layers 1-2 within 0.03 of the best row of the table).",
        ("bert",),
        "§4.3, Table 1",
    ),
    Claim(
        "A9b",
        "Table 1: FastText is best on MEN and WS353 (it scores at least as high as every row of the model's "
        "PC embeddings, within 0.03).",
        ("elmo", "bert", "gpt2"),
        "§4.3, Table 1",
    ),
    Claim(
        "A9c",
        "Table 1: GPT-2's rows are the worst: on at least 8 of the 9 tasks each of its rows scores below every "
        "row of the other models and baselines (within 0.03; the paper's GPT-2 is not worst on RW).",
        ("gpt2",),
        "§4.3, Table 1",
    ),
    Claim(
        "A9d",
        "Table 1: the scores of the model's rows lie within ±0.03 of the paper's.",
        ("elmo", "bert", "gpt2"),
        "§4.3, Table 1",
    ),
    Claim(
        "A10",
        "Per-layer values lie within ±0.05 of the released statistics.",
        ("elmo", "bert", "gpt2"),
        "Figs. 1-4 (released statistics)",
    ),
    Claim(
        "S1",
        "No layer of the contextualizing model is isotropic: baseline cosine clearly above 0 "
        "(> 0.05) in every layer ≥ 1.",
        (),
        "abstract",
    ),
    Claim(
        "S2",
        "A word's representations are still more similar to each other than to other words': "
        "self-similarity exceeds the baseline on average in every layer.",
        (),
        "abstract",
    ),
    Claim(
        "S3",
        "Upper layers are more context-specific: adjusted self-similarity falls (almost monotonically) with depth "
        "(Spearman ρ(layer, adjusted self-similarity) ≤ -0.5).",
        (),
        "abstract; §4.2, Fig. 2",
    ),
    Claim(
        "S4",
        "Under 5% of the variance in a word's representations is explained by a static embedding, "
        "on average, in every layer ≥ 1 (adjusted MEV < 0.05; the adjusted part of A8).",
        (),
        "abstract; §4.3, Fig. 4",
    ),
    Claim(
        "S5",
        "Stopwords are among the most context-specific words: 'the', 'of', 'to' and 'and' have a "
        "mean self-similarity below that of the median word.",
        (),
        "§4.2",
    ),
)


def claims_for(paper_model: str | None) -> tuple[Claim, ...]:
    """The claims to check on a model standing for ``paper_model`` (None: only the general ones)."""
    return tuple(c for c in CLAIMS if not c.about or (paper_model is not None and paper_model in c.about))
