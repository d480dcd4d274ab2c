# Configuration checks and the helpers every rule file uses.
from snakemake.utils import validate

from contextuality.config import ConfigError, check_config, validate_against_schema


try:
    # One clear line per problem first; Snakemake's validate then fills in the schema's defaults.
    validate_against_schema(config, workflow.source_path("../schemas/config.schema.yaml"))
    validate(config, schema="../schemas/config.schema.yaml")
    check_config(config)
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
    return [
        f"{RESULTS}/corpus/sentences.parquet",
        f"{RESULTS}/corpus/word_index.parquet",
    ]
