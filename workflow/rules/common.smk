# Configuration checks and the helpers every rule file uses.
import json
import os
from pathlib import Path

from snakemake.exceptions import IncompleteCheckpointException
from snakemake.utils import validate

from contextuality.workflow.config import ConfigError, check_config, check_targets, command_line_targets, validate_against_schema
from contextuality.workflow.config import check_bundled_corpus, check_duplicate_keys
from contextuality.core.settings import Settings, as_params
from contextuality.extraction.devices import LOCAL_GPUS_ENV
from contextuality.core.runtime import prepend_python_path
from contextuality.models.loading import record_shape, record_weights_bytes
from contextuality.paper import FIGURES
from contextuality.models.sources import BUILD_KEYS, SOURCE_KEYS


try:
    check_duplicate_keys(workflow.configfiles)  # a key given twice: YAML would keep the last silently

    # One clear line per problem first; Snakemake's validate then fills in the schema's defaults.
    validate_against_schema(config, workflow.source_path("../schemas/config.schema.yaml"))
    validate(config, schema="../schemas/config.schema.yaml")
    check_config(config)
    # Targets naming an unconfigured model or a layer out of range stop the run here too, before any
    # job, in one line (the DAG would say "No rule to produce ..." or raise inside an input function).
    check_targets(command_line_targets(), config)

    check_bundled_corpus(config)  # a malformed release file: its FILE:LINE message, before any job
except ConfigError as err:
    raise WorkflowError(str(err)) from None

# Every setting, resolved once from the validated config; the rules' params are taken from it.
SETTINGS = Settings.from_config(config)

# What every job inherits (SLURM jobs too, with --export=ALL): HDF5's file locks fail on NFS/Lustre;
# and the contextuality package from src/, which the conda environments (envs/) do not install.
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
prepend_python_path(Path(workflow.basedir) / "src")

RESULTS = "results"
MODELS = sorted(config["models"])


wildcard_constraints:
    model="|".join(MODELS) if MODELS else "(?!)",
    shard=r"\d+",
    layer=r"\d+",


def final_outputs(wildcards):
    """Everything `snakemake` builds by default (an input function: layer counts may come from a checkpoint).

    The stored vectors are deliverables too: every shard and every layer file is a target, so a
    deleted one is rebuilt (with what depends on it) instead of passing unnoticed behind newer tables.
    """
    targets = [
        f"{RESULTS}/corpus/sentences.parquet",
        f"{RESULTS}/corpus/word_index.parquet",
    ]
    for model in MODELS:
        targets += stored_vectors(model)
    targets += expand(f"{RESULTS}/metrics/{{model}}/context_specific_words.csv", model=MODELS)
    targets += expand(f"{RESULTS}/figures/{{name}}.png", name=FIGURES)
    targets += expand(f"{RESULTS}/figures/{{model}}/{{name}}.png", model=MODELS, name=MODEL_FIGURES)
    targets += [f"{RESULTS}/tables/summary.md", f"{RESULTS}/tables/claims.md"]
    if config["static"]["enabled"]:
        targets += [f"{RESULTS}/tables/table1.md"]
    if config["extraction"]["export_classic"]:
        targets += expand(f"{RESULTS}/export/{{model}}/word2sent.json", model=MODELS)
    return targets


# Keys of a model entry that change the stored vectors, besides BUILD_KEYS (the weights). Reporting keys
# (label, stands_for) are in no job's params but the reporting rules', so renaming a model re-draws the
# figures and tables only.
EXTRACTION_KEYS = ("indexing", "tokenization", "max_length", "pooling", "batch_size", "stateful", "allow_pickle")


def model_keys(*keys):
    """Params function: only the given keys of the wildcards' model entry (what changes the rule's output)."""

    def select(wildcards):
        spec = config["models"][wildcards.model]
        return {key: spec[key] for key in keys if key in spec}

    return select


def model_seed(wildcards):
    """The seed a model's build depends on: a random model's initialisation; nothing for downloaded weights."""
    return config["seed"] if config["models"][wildcards.model]["source"] == "random" else None


def download_for_model(wildcards):
    """The download a model's build needs; a random model is built from the corpus instead."""
    if config["models"][wildcards.model]["source"] == "random":
        return []
    return f"resources/models/{wildcards.model}/download"


def needs_corpus_for_model(wildcards):
    return config["models"][wildcards.model]["source"] == "random"


def n_shards_of(model):
    """A model's shard count: its own `n_shards` (stateful ELMo needs 1), else `extraction.n_shards`."""
    return config["models"][model]["n_shards"] or config["extraction"]["n_shards"]


def expand_shards(pattern):
    """Input function: every shard file of the model in the wildcards."""

    def shard_files(wildcards):
        return [pattern.format(model=wildcards.model, shard=shard) for shard in range(n_shards_of(wildcards.model))]

    return shard_files


# The GPUs of this machine the run may use: Snakemake's own `gpu` resource (--resources gpu=N, or
# profiles/default). Extraction jobs lease one of them each (contextuality.devices); they read the
# count from the environment, as they read HDF5's locking setting.
LOCAL_GPUS = workflow.global_resources.get("gpu").value or 0
os.environ[LOCAL_GPUS_ENV] = str(LOCAL_GPUS)


def gpus_per_shard(wildcards):
    """One GPU per shard job when extraction runs on CUDA, else none: the one place the GPU policy lives.

    `extraction.device: cuda` (or `cuda:N`) always asks for one; `auto` (the default) asks for one when
    the run has GPUs (`--resources gpu=N`, N >= 1), so a CPU machine needs nothing. On SLURM and
    Kubernetes the profile's `set-resources: extract: gpu: 1` asks the scheduler for one per shard job,
    and the job computes on the GPU it was given (contextuality.extraction.devices.choose_device).
    """
    device = config["extraction"]["device"]
    return 1 if device.startswith("cuda") or (device == "auto" and LOCAL_GPUS > 0) else 0


def model_layers_dim(record_path):
    """(stored layers including the input layer, vector size) of the materialised model.

    Before the model exists (dry run, DAG planning) the largest shape of the paper's models is assumed:
    13 x 1024 (BERT-base/GPT-2 have 13 x 768, ELMo 3 x 1024).
    """
    return record_shape(record_path) or (13, 1024)


def n_layers_of(model):
    """Layers a model returns (input layer included): a random model's from its config, any other's from
    its source.json once built (the build is a checkpoint: the DAG's layer files follow from it)."""
    spec = config["models"][model]
    if spec["source"] == "random":
        return spec["n_hidden_layers"] + 1
    record = checkpoints.materialise_model.get(model=model).output.record
    return record_shape(record)[0]


def stored_vectors(model):
    """The shard and layer files of a model, once its layer count is known.

    Not yet known (a downloaded model not built): nothing is asked here, and the model is built and its
    layers extracted for its measurements; asking here would wait for each model's build in turn.
    """
    try:
        layers = layer_names(model)
    except IncompleteCheckpointException:
        return []
    shards = range(n_shards_of(model))
    return expand(f"{RESULTS}/embeddings/{model}/shards/shard_{{shard}}.h5", shard=shards) + expand(
        f"{RESULTS}/embeddings/{model}/layers/layer_{{layer}}.h5", layer=layers
    )


def layer_names(model):
    return [f"{layer:02d}" for layer in range(n_layers_of(model))]


def every_layer(pattern):
    """Input function: ``pattern`` for every layer of the wildcards' model."""

    def files(wildcards):
        return [pattern.format(model=wildcards.model, layer=layer) for layer in layer_names(wildcards.model)]

    return files


# Calibration of the extraction estimates (docs/scaling.md shows the arithmetic):
# * EXTRACT_BASE_MB: Python + torch + transformers + pandas + h5py imported and a model built measured
#   464 MB peak RSS on the project machine (/usr/bin/time -v); doubled for the tokenised shard,
#   DataFrames and a CUDA context's host memory.
# * STS sentences: ~330k WordPieces over 25,088 sentences = 13.2 per sentence, plus 2 special tokens
#   (the default run's MiniLM tokenizer measured 359k tokens with [CLS]/[SEP] = 14.3 per sentence).
#   A padded batch is bounded by 128 tokens and a window's mean by 64 units per sentence (the
#   longest STS sentences sort together into one batch; no window averages more than that).
# * CPU throughput: all-MiniLM-L6-v2 (23M parameters) ran ~1,500 tokens/s on the project's 2-core
#   CPU (2,000-3,300 in later runs); time per token scales with the parameter count (2 FLOPs per
#   parameter and token). Check: SmolLM2-135M predicted 256 tokens/s, measured 185 on a loaded
#   machine, well inside the runtime bound (x2 + 10 min).
EXTRACT_BASE_MB = 1000
TOKENS_PER_SENTENCE = 15
MAX_BATCH_TOKENS = 128
MAX_WINDOW_UNITS = 64
CPU_TOKENS_PER_S_23M = 1500
STS_SENTENCES = 25088


def shard_sentences(model):
    """Sentences in the largest shard of a model."""
    n_sentences = config["corpus"]["max_sentences"] or STS_SENTENCES
    return -(-n_sentences // n_shards_of(model))


def extraction_mem_mb(wildcards, input, attempt=1):
    """Host memory (MB) of one shard job, from the model's size and shape and the batch size.

    weights twice (the checkpoint and the built model while loading) + one batch's hidden states of
    every layer (float32, the torch tensor and its numpy copy) + one window (4 batches) of pooled unit
    vectors (the per-sentence arrays and their concatenation) + the interpreter; x attempt on retries.
    Vectors go to HDF5 window by window, so the shard's size does not add to the peak.
    """
    weights_mb = record_weights_bytes(input.record) / 1e6
    layers, dim = model_layers_dim(input.record)
    batch = config["models"][wildcards.model].get("batch_size") or config["extraction"]["batch_size"]
    vector_bytes = layers * dim * 4 * 2
    batch_mb = batch * MAX_BATCH_TOKENS * vector_bytes / 1e6
    window_mb = 4 * batch * MAX_WINDOW_UNITS * vector_bytes / 1e6
    return int((EXTRACT_BASE_MB + 2 * weights_mb + batch_mb + window_mb) * attempt)


def extraction_runtime_min(wildcards, input, attempt=1):
    """Minutes for one shard from the model size and the shard's share of sentences.

    CPU-calibrated (see above), so an upper bound on a GPU, which schedulers that kill jobs at their
    limit need; 10 minutes are added for start-up and model loading, and the whole doubles per retry.
    """
    params_m = max(record_weights_bytes(input.record) / 4e6, 1.0)  # fp32 bytes -> millions of parameters
    seconds = shard_sentences(wildcards.model) * TOKENS_PER_SENTENCE * params_m / (CPU_TOKENS_PER_S_23M * 23)
    return int((10 + 2 * seconds / 60) * attempt)


MODEL_FIGURES = ["geometry", "rogue_dimensions"]
MODEL_LABELS = {key: spec.get("label") or key for key, spec in config["models"].items()}
STANDS_FOR = {key: spec.get("stands_for") for key, spec in config["models"].items()}
MODEL_SOURCES = {
    key: spec.get("id") or spec.get("package") or spec.get("path") or spec.get("options") or spec["source"]
    for key, spec in config["models"].items()
}


def measure_mem_mb(wildcards, input, attempt=1):
    """MB of one measurement job: the layer read in metrics.compute_dtype (float16 storage is converted as it is
    read), batches of words (about 64 MB each, a few at once, the post-processed copies of a batch included), 1 GiB; x attempt.

    rows x dim from the model's manifest; before it exists, the paper's largest layer is assumed:
    330k WordPieces x 1024 dims.
    """
    work_bytes = 8 if config["metrics"]["compute_dtype"] == "float64" else 4
    try:
        shape = json.loads(open(input.manifest).read())
        rows_dims = shape["rows"] * shape["dim"]
    except (OSError, ValueError, KeyError):
        rows_dims = 330_000 * 1024
    return int((rows_dims * work_bytes / 1e6 + 6 * 64 + 1024) * attempt)


def extraction_settings(wildcards):
    """The extraction keys that change the stored vectors (disk margins and GPU counts do not)."""
    keep = ("batch_size", "device", "compute_dtype", "storage_dtype")
    return {"n_shards": n_shards_of(wildcards.model), **{key: config["extraction"][key] for key in keep}}
