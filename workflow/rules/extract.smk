# Every layer's vectors of every sentence: one extraction job per shard (the only copy of the vectors),
# then the model's units table and manifest, and one small virtual file per layer over the shards.


rule extract:
    input:
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
        sentences=rules.corpus.output.sentences,
        words=rules.words.output.words,
    output:
        shard=f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5",
        units=f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.units.parquet",
    params:
        # only what changes the stored vectors, so toggling e.g. export_classic re-extracts nothing
        spec=model_keys(*EXTRACTION_KEYS),
        extraction=extraction_settings,
    threads: 2
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


rule gather:
    input:
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
        units=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.units.parquet"),
    output:
        units=f"{RESULTS}/embeddings/{{model}}/units.parquet",
        manifest=f"{RESULTS}/embeddings/{{model}}/manifest.json",
    log:
        "logs/extract/{model}/gather.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/gather.py"


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


rule occurrences:
    input:
        units=rules.gather.output.units,
        word_index=rules.words.output.index,
        sentences=rules.corpus.output.sentences,
    output:
        occurrences=f"{RESULTS}/embeddings/{{model}}/occurrences.parquet",
    params:
        spec=model_keys("indexing"),
        words=config["words"],
    log:
        "logs/extract/{model}/occurrences.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/occurrences.py"


rule export_classic:
    # Opt-in (extraction.export_classic): the layout of the paper's code and allennlp's `elmo` command.
    input:
        layers=every_layer(f"{RESULTS}/embeddings/{{model}}/layers/layer_{{layer}}.h5"),
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
        occurrences=rules.occurrences.output.occurrences,
    output:
        embeddings=f"{RESULTS}/export/{{model}}/embeddings.hdf5",
        word2sent=f"{RESULTS}/export/{{model}}/word2sent.json",
    log:
        "logs/export/{model}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/export_classic.py"
