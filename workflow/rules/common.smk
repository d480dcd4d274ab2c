# Configuration checks and the helpers every rule file uses.
import sys

from snakemake.utils import validate

from contextuality.config import ConfigError, check_config, check_targets, requested_targets, validate_against_schema


try:
    # One clear line per problem first; Snakemake's validate then fills in the schema's defaults.
    validate_against_schema(config, workflow.source_path("../schemas/config.schema.yaml"))
    validate(config, schema="../schemas/config.schema.yaml")
    check_config(config)
    # Targets naming an unconfigured model or a layer out of range stop the run here too, before any job.
    check_targets(requested_targets(sys.argv[1:]), config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None

RESULTS = "results"
MODELS = sorted(config["models"])


wildcard_constraints:
    model="|".join(MODELS) if MODELS else "(?!)",
    shard=r"\d+",
    layer=r"\d+",


def final_outputs():
    """Everything `snakemake` builds by default."""
    targets = [
        f"{RESULTS}/corpus/sentences.parquet",
        f"{RESULTS}/corpus/word_index.parquet",
    ]
    targets += expand(f"{RESULTS}/metrics/{{model}}/context_specific_words.csv", model=MODELS)
    targets += expand(f"{RESULTS}/figures/{{name}}.png", name=FIGURES)
    targets += [f"{RESULTS}/tables/summary.md", f"{RESULTS}/tables/claims.md"]
    if config["static"]["enabled"]:
        targets += [f"{RESULTS}/tables/table1.md"]
    if config["extraction"]["export_classic"]:
        targets += expand(f"{RESULTS}/export/{{model}}/word2sent.json", model=MODELS)
    return targets


def model_spec(wildcards):
    return config["models"][wildcards.model]


def needs_corpus_for_model(wildcards):
    return config["models"][wildcards.model]["source"] == "random"


def expand_shards(pattern):
    """Input function: every shard file of the model in the wildcards."""

    def shard_files(wildcards):
        n_shards = config["extraction"]["n_shards"]
        return [pattern.format(model=wildcards.model, shard=shard) for shard in range(n_shards)]

    return shard_files


def on_cuda():
    device = config["extraction"]["device"]
    return device.startswith("cuda") or (device == "auto" and config["extraction"]["n_gpus"] > 0)


def gpus_per_shard(wildcards):
    """One GPU per shard job on CUDA, none on CPU (so CPU runs need no --resources gpu=N)."""
    return 1 if on_cuda() else 0


def model_size_bytes(record_path):
    """Weights size from the materialised model (0 before it exists, e.g. in a dry run)."""
    import json
    from pathlib import Path

    if not Path(record_path).exists():
        return 0
    record = json.loads(Path(record_path).read_text())
    if record["source"] == "elmo":
        return Path(record["weights_file"]).stat().st_size
    return sum((Path(record["hf_dir"]) / name).stat().st_size for name in record["weights"])


def extraction_mem_mb(wildcards, input):
    """Weights (held once, plus a copy while loading) + one block of vectors + interpreter."""
    weights_mb = model_size_bytes(input.record) / 1e6
    block_mb = 1024 * 40 * 40 * 1024 * 4 / 1e6  # 1024 sentences x 40 units x 40 layers x 1024 dims, fp32
    return int(2 * weights_mb + block_mb + 1500)


def extraction_runtime_min(wildcards, input):
    """Minutes for one shard from the model size and the shard's share of sentences.

    Calibrated on the 2-core CPU (all-MiniLM-L6-v2: about 1,500 tokens/s for 23M parameters); a
    GPU is far faster, so this is a safe upper bound for schedulers that kill jobs at their limit.
    """
    n_sentences = config["corpus"]["max_sentences"] or 26000
    shard_sentences = n_sentences / config["extraction"]["n_shards"]
    params_m = max(model_size_bytes(input.record) / 4e6, 1.0)  # fp32 bytes -> millions of parameters
    seconds = shard_sentences * 15 * params_m / (1500 * 23)
    return int(10 + 2 * seconds / 60)


FIGURES = ["anisotropy", "self_similarity", "intra_sentence", "mev"]
MODEL_LABELS = {key: spec.get("label") or key for key, spec in config["models"].items()}
PAPER_MODELS = {key: spec.get("stands_for") for key, spec in config["models"].items()}
MODEL_SOURCES = {
    key: spec.get("id") or spec.get("package") or spec.get("path") or spec.get("options") or spec["source"]
    for key, spec in config["models"].items()
}


def measure_mem_mb(wildcards, input):
    """One layer's vectors as float32 plus a float64 working copy of the sampled rows, plus 1 GiB."""
    import json
    from pathlib import Path

    manifest = Path(input.layers) / "manifest.json"
    if not manifest.exists():
        return 4000
    shape = json.loads(manifest.read_text())
    return int(shape["rows"] * shape["dim"] * 4 * 2 / 1e6 + 1024)


def extraction_settings(wildcards):
    keep = ("n_shards", "batch_size", "device", "n_gpus", "compute_dtype", "storage_dtype",
            "max_length_policy", "min_free_disk_factor")
    return {key: config["extraction"][key] for key in keep}
