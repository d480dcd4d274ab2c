# The measurements of a corpus (results/metrics/{corpus}/{model}/): every layer of each model, then the model's tables. Either each layer is read from the
# HDF5 store by its own job (measure_layer), or every layer is measured where the model's forward passes leave
# it, on the device (metrics.on_device: measure_model, then device_layer takes each layer's files out of its
# part's tar). Each per-layer file has one producer, so combine_layers and everything after it are the same.

# Which rule writes a layer's record, words and PC vectors: device_layer on the device path, else measure_layer
# (both are defined under every config; the order is the run's).
workflow.ruleorder(*FILES.per_layer_order())


localrules:
    device_layer,


rule measure_model:
    # One job per model (or per part, metrics.device_parts): the plan's forward passes, every layer of the
    # part measured on the job's device, in groups of layers sized from its free memory; no store read.
    input:
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
        tokens=rules.plan.output.tokens,
        units=rules.plan.output.units,
        occurrences=rules.plan.output.occurrences,
        # the similarity stage's rows: the job gathers their sample from each resident layer
        similarity_rows=layout.SIMILARITY_ROWS if SETTINGS.similarity.enabled else [],
    output:
        **({"sample": layout.DEVICE_SAMPLE} if SETTINGS.similarity.enabled else {}),
        layers=layout.DEVICE_PART,
        record=layout.DEVICE_RECORD,
    log:
        layout.MEASURE_MODEL_LOG,
    benchmark:
        layout.MEASURE_MODEL_BENCHMARK
    conda:
        "../../envs/device.yaml"
    threads: SETTINGS.extraction.threads
    resources:
        gpu=GPUS.device_measure,
        mem_mb=JOBS.device_measure_mem_mb,
        runtime=JOBS.device_measure_runtime_min,
    params:
        # what changes the measured rows (the stored-vector settings but the number of shards, a stateful model's
        # batches), the measures (not metrics.memory_mb, the store path's budget) and the part's layers (the
        # number of parts); the batches, the shards, the device and its memory share change no number beyond the
        # tested tolerance (their windows cut no shard here), and the job reads them from the config
        shard=PARAMS.device_rows,
        batches=PARAMS.batches,
        measure=PARAMS.device_measure,
        parts=SETTINGS.metrics.device.device_parts,
        # what changes the similarity sample it gathers (none when the stage is off)
        sample=PARAMS.device_sample,
    script:
        "../scripts/measure_model.py"


rule device_layer:
    # Seconds: one layer's record, words table and PC vectors taken out of its part's tar.
    input:
        part=FILES.device_part_of_layer,
    output:
        record=layout.LAYER_RECORD,
        words=layout.LAYER_WORDS,
        pcs=layout.PCS,
    log:
        layout.DEVICE_LAYER_LOG,
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/device_layer.py"


rule measure_layer:
    # One job per (model, layer): reads the layer once (its shards, checksums verified) after checking it
    # against the model's manifest; every measure (the paper's, exact baselines, geometry, post-processed
    # variants) comes from that one read. The units name the tokens carrying massive activations.
    input:
        layer=layout.LAYER_FILE,
        shards=FILES.expand_shards(layout.SHARD),
        manifest=rules.manifest.output.manifest,
        occurrences=rules.plan.output.occurrences,
        units=rules.plan.output.units,
    output:
        record=layout.LAYER_RECORD,
        words=layout.LAYER_WORDS,
        pcs=layout.PCS,
    log:
        layout.MEASURE_LAYER_LOG,
    benchmark:
        layout.MEASURE_BENCHMARK
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=JOBS.measure_mem_mb,
    params:
        # every metrics key but top_k_words, and the seed: what changes a layer's measures, in a fixed order
        measure=as_params(SETTINGS.metrics.measure),
    script:
        "../scripts/measure_layer.py"


rule combine_layers:
    # Joins the per-layer results into the model's tables, after checking they cover exactly the layers of what
    # they were measured on (the manifest, or the device's record), and, with both, that the two agree. On the device
    # path each part's record is checked against the run's settings that change the rows (its params), weights and plan.
    input:
        records=FILES.every_layer(layout.LAYER_RECORD),
        words=FILES.every_layer(layout.LAYER_WORDS),
        measured_on=FILES.measured_on,
        store_manifest=FILES.store_manifest_beside_device,
        # on the device path, what the run's rows are made from: each part's record is checked against it
        made_from=FILES.device_made_from,
    output:
        words=layout.WORDS,
        layers=layout.LAYERS_CSV,  # in the report as a page (report.smk: model_pages)
        layers_parquet=layout.LAYERS_PARQUET,
        postprocess=layout.POSTPROCESS,  # in the report as a page (report.smk: model_pages)
        rogue=layout.ROGUE,
        context_words=layout.CONTEXT_WORDS,  # in the report as a page (report.smk: model_pages)
    log:
        layout.COMBINE_LAYERS_LOG,
    benchmark:
        layout.COMBINE_BENCHMARK
    conda:
        "../../envs/analysis.yaml"
    params:
        **PARAMS.device_combine(),
        top_k=SETTINGS.metrics.top_k_words,
    script:
        "../scripts/combine_layers.py"
