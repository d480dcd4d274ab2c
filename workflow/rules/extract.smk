# Every layer's vectors of every sentence: one job per shard, then one gather per model.


rule extract:
    input:
        record=rules.models.output.record,
        sentences=rules.corpus.output.sentences,
        words=rules.words.output.words,
    output:
        shard=f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5",
        units=f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.units.parquet",
    params:
        spec=model_spec,
        # only what changes the stored vectors, so toggling e.g. export_classic re-extracts nothing
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
        layers=directory(f"{RESULTS}/embeddings/{{model}}/layers"),
    params:
        storage_dtype=config["extraction"]["storage_dtype"],
    log:
        "logs/extract/{model}/gather.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/gather.py"


rule occurrences:
    input:
        layers=rules.gather.output.layers,
        word_index=rules.words.output.index,
        sentences=rules.corpus.output.sentences,
    output:
        occurrences=f"{RESULTS}/embeddings/{{model}}/occurrences.parquet",
    params:
        spec=model_spec,
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
        layers=rules.gather.output.layers,
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
