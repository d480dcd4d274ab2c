# The measurements: one job per layer of each model, then the model's tables.


rule measure_layer:
    # One job per (model, layer): reads the layer once (its shards, checksums verified) after checking it
    # against the model's manifest; every measure (the paper's, exact baselines, geometry, post-processed
    # variants) comes from that one read. The units name the tokens carrying massive activations.
    input:
        layer=layout.LAYER_FILE,
        shards=expand_shards(layout.SHARD),
        manifest=rules.manifest.output.manifest,
        occurrences=rules.plan.output.occurrences,
        units=rules.plan.output.units,
    output:
        record=layout.LAYER_RECORD,
        words=layout.LAYER_WORDS,
        pcs=layout.PCS,
    params:
        # every metrics key but top_k_words, and the seed: what changes a layer's measures, in a fixed order
        measure=as_params(SETTINGS.metrics.measure),
    resources:
        mem_mb=measure_mem_mb,
    log:
        "logs/metrics/{model}/layer_{layer}.log",
    benchmark:
        layout.MEASURE_BENCHMARK
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/measure_layer.py"


rule combine_layers:
    # Joins the per-layer results into the model's tables, after checking they cover exactly the manifest's layers.
    input:
        records=every_layer(layout.LAYER_RECORD),
        words=every_layer(layout.LAYER_WORDS),
        manifest=rules.manifest.output.manifest,
    output:
        words=layout.WORDS,
        layers=report(
            layout.LAYERS_CSV,
            caption="../report/layers_table.rst",
            category="Tables",
            subcategory="Per-layer measurements",
            labels={"model": "{model}", "table": "per layer"},
        ),
        layers_parquet=layout.LAYERS_PARQUET,
        postprocess=report(
            layout.POSTPROCESS,
            caption="../report/postprocess_table.rst",
            category="Tables",
            subcategory="Post-processed variants",
            labels={"model": "{model}", "table": "post-processing"},
        ),
        rogue=layout.ROGUE,
        context_words=report(
            layout.CONTEXT_WORDS,
            caption="../report/context_words.rst",
            category="Tables",
            subcategory="Context-specific words",
            labels={"model": "{model}", "table": "words"},
        ),
    params:
        top_k=SETTINGS.metrics.top_k_words,
    log:
        "logs/metrics/{model}/combine.log",
    benchmark:
        layout.COMBINE_BENCHMARK
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/combine_layers.py"
