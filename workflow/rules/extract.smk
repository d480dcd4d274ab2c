# Every layer's vectors of every sentence of a corpus (results/embeddings/{corpus}/{model}/): the model's plan, one extraction job per shard (the
# only copy of the vectors), the manifest, and one small virtual file per layer over the shards. The store is
# built when the run reads it or keeps it (extraction.store), or on demand: `snakemake store`.


rule plan:
    # The model's plan before any extraction: every sentence's input ids, every stored unit (its token
    # range), the occurrences to measure and what cannot be stored (truncation, pieces spanning words).
    # Stops here, before extraction, when fewer than 2 indexed words would be stored.
    input:
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
        sentences=layout.SENTENCES,
        words=layout.SPACY_WORDS,
        word_index=layout.WORD_INDEX,
    output:
        tokens=layout.TOKENS,
        units=layout.UNITS,
        occurrences=layout.OCCURRENCES,
        losses=layout.LOSSES,
    log:
        layout.PLAN_LOG,
    benchmark:
        layout.PLAN_BENCHMARK
    conda:
        "../../envs/models.yaml"
    params:
        plan=lambda wildcards: as_params(SETTINGS.plan(wildcards.model)),
    script:
        "../scripts/plan.py"


rule extract:
    input:
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
        tokens=rules.plan.output.tokens,
        units=rules.plan.output.units,
    output:
        shard=layout.SHARD,
    log:
        layout.EXTRACT_LOG,
    benchmark:
        layout.EXTRACT_BENCHMARK
    conda:
        "../../envs/models.yaml"
    threads: SETTINGS.extraction.threads
    resources:
        gpu=GPUS.per_shard,
        mem_mb=JOBS.extraction_mem_mb,
        runtime=JOBS.extraction_runtime_min,
    params:
        # only what changes the stored vectors, so toggling e.g. export_classic, or lowering max_batch_tokens after
        # one shard ran out of memory, re-extracts nothing; and what of the batches changes a shard (batch_params)
        shard=lambda wildcards: stored_params(SETTINGS.shard(wildcards.model)),
        batches=lambda wildcards: batch_params(SETTINGS.models[wildcards.model]),
    script:
        "../scripts/extract.py"


rule manifest:
    # The model's manifest: every shard's rows checked against the plan's units, and its provenance (weights,
    # plan files, shard settings) against source.json, the plan and the settings; the vectors stay in the shards.
    input:
        shards=FILES.expand_shards(layout.SHARD),
        record=rules.materialise_model.output.record,
        tokens=rules.plan.output.tokens,
        units=rules.plan.output.units,
    output:
        manifest=layout.MANIFEST,
    log:
        layout.MANIFEST_LOG,
    benchmark:
        layout.MANIFEST_BENCHMARK
    conda:
        "../../envs/analysis.yaml"
    params:
        shard=lambda wildcards: stored_params(SETTINGS.shard(wildcards.model)),
    script:
        "../scripts/manifest.py"


localrules:
    layer_file,  # a few kB of HDF5 metadata: on a cluster, one job a layer would wait longer in the queue than it runs


rule layer_file:
    # A few kB: HDF5 virtual dataset over the shards' layer_{layer} datasets, plus offsets and attributes
    # (the shards' provenance, checked against the manifest's).
    input:
        shards=FILES.expand_shards(layout.SHARD),
        manifest=rules.manifest.output.manifest,
    output:
        layer=layout.LAYER_FILE,
    log:
        layout.LAYER_FILE_LOG,
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/layer_file.py"


rule export_classic:
    # Opt-in (extraction.export_classic): the layout of the paper's code and allennlp's `elmo` command.
    input:
        layers=FILES.every_layer(layout.LAYER_FILE),
        shards=FILES.expand_shards(layout.SHARD),
        manifest=rules.manifest.output.manifest,
        occurrences=rules.plan.output.occurrences,
        sentences=layout.SENTENCES,
    output:
        embeddings=layout.EXPORT_EMBEDDINGS,
        word2sent=layout.EXPORT_WORD2SENT,
    log:
        layout.EXPORT_CLASSIC_LOG,
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/export_classic.py"


rule store:
    # Target: every model's store of every configured corpus (its shards, manifest and layer files), whether or not the run's measures read it.
    input:
        FILES.store_files,
