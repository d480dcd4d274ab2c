# Every layer's vectors of every sentence: the model's plan, one extraction job per shard (the
# only copy of the vectors), the manifest, and one small virtual file per layer over the shards.


rule plan:
    # The model's plan before any extraction: every sentence's input ids, every stored unit (its token
    # range), the occurrences to measure and what cannot be stored (truncation, pieces spanning words).
    # Stops here, before extraction, when fewer than 2 indexed words would be stored.
    input:
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
        sentences=rules.corpus.output.sentences,
        words=rules.words.output.words,
        word_index=rules.words.output.index,
    output:
        tokens=f"{RESULTS}/embeddings/{{model}}/tokens.parquet",
        units=f"{RESULTS}/embeddings/{{model}}/units.parquet",
        occurrences=f"{RESULTS}/embeddings/{{model}}/occurrences.parquet",
        losses=f"{RESULTS}/embeddings/{{model}}/losses.json",
    params:
        spec=model_keys("indexing", "tokenization", "max_length"),
        policy=config["extraction"]["max_length_policy"],
        words=config["words"],
    log:
        "logs/extract/{model}/plan.log",
    conda:
        "../../envs/models.yaml"
    script:
        "../scripts/plan.py"


rule extract:
    input:
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
        tokens=rules.plan.output.tokens,
        units=rules.plan.output.units,
    output:
        shard=f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5",
    params:
        # only what changes the stored vectors, so toggling e.g. export_classic re-extracts nothing
        spec=model_keys(*EXTRACTION_KEYS),
        extraction=extraction_settings,
    threads: config["extraction"]["threads"]
    resources:
        gpu=gpus_per_shard,
        mem_mb=extraction_mem_mb,
        runtime=extraction_runtime_min,
    log:
        f"logs/extract/{{model}}/shard_{{shard}}.log",
    conda:
        "../../envs/models.yaml"
    script:
        "../scripts/extract.py"


rule manifest:
    # The model's manifest: every shard's rows checked against the plan's units; the vectors stay in the shards.
    input:
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
        units=rules.plan.output.units,
    output:
        manifest=f"{RESULTS}/embeddings/{{model}}/manifest.json",
    log:
        "logs/extract/{model}/manifest.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/manifest.py"


rule layer_file:
    # A few kB: HDF5 virtual dataset over the shards' layer_{layer} datasets, plus offsets and attributes.
    input:
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
    output:
        layer=f"{RESULTS}/embeddings/{{model}}/layers/layer_{{layer}}.h5",
    log:
        "logs/extract/{model}/layer_{layer}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/layer_file.py"


rule export_classic:
    # Opt-in (extraction.export_classic): the layout of the paper's code and allennlp's `elmo` command.
    input:
        layers=every_layer(f"{RESULTS}/embeddings/{{model}}/layers/layer_{{layer}}.h5"),
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
        occurrences=rules.plan.output.occurrences,
        sentences=rules.corpus.output.sentences,
    output:
        embeddings=f"{RESULTS}/export/{{model}}/embeddings.hdf5",
        word2sent=f"{RESULTS}/export/{{model}}/word2sent.json",
    log:
        "logs/export/{model}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/export_classic.py"
