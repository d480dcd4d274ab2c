# The measurements: one job per layer of each model, then the model's tables.


rule measure_layer:
    # One job per (model, layer): reads the layer once (its shards, checksums verified) after checking it
    # against the model's manifest; every measure (the paper's, exact baselines, geometry, post-processed
    # variants) comes from that one read. The units name the tokens carrying massive activations.
    input:
        layer=f"{RESULTS}/embeddings/{{model}}/layers/layer_{{layer}}.h5",
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
        manifest=rules.manifest.output.manifest,
        occurrences=rules.plan.output.occurrences,
        units=rules.plan.output.units,
    output:
        record=f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.json",
        words=f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.words.parquet",
        pcs=f"{RESULTS}/metrics/{{model}}/pcs/layer_{{layer}}.txt",
    params:
        # every metrics key but top_k_words, and the seed: what changes a layer's measures, in a fixed order
        measure=as_params(SETTINGS.metrics.measure),
    resources:
        mem_mb=measure_mem_mb,
    log:
        "logs/metrics/{model}/layer_{layer}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/measure_layer.py"


rule combine_layers:
    # Joins the per-layer results into the model's tables, after checking they cover exactly the manifest's layers.
    input:
        records=every_layer(f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.json"),
        words=every_layer(f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.words.parquet"),
        manifest=rules.manifest.output.manifest,
    output:
        words=f"{RESULTS}/metrics/{{model}}/words.parquet",
        layers=report(
            f"{RESULTS}/metrics/{{model}}/layers.csv",
            caption="../report/layers_table.rst",
            category="Tables",
            subcategory="Per-layer measurements",
            labels={"model": "{model}", "table": "per layer"},
        ),
        layers_parquet=f"{RESULTS}/metrics/{{model}}/layers.parquet",
        postprocess=report(
            f"{RESULTS}/metrics/{{model}}/postprocess.csv",
            caption="../report/postprocess_table.rst",
            category="Tables",
            subcategory="Post-processed variants",
            labels={"model": "{model}", "table": "post-processing"},
        ),
        rogue=f"{RESULTS}/metrics/{{model}}/rogue_dimensions.csv",
        context_words=report(
            f"{RESULTS}/metrics/{{model}}/context_specific_words.csv",
            caption="../report/context_words.rst",
            category="Tables",
            subcategory="Context-specific words",
            labels={"model": "{model}", "table": "words"},
        ),
    params:
        top_k=SETTINGS.metrics.top_k_words,
    log:
        "logs/metrics/{model}/combine.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/combine_layers.py"
