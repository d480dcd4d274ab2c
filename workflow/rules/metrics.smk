# The paper's measurements per model, then the figures, tables and claims across models.


rule measure_layer:
    # One job per (model, layer): reads the layer once (its shards, checksums verified) after checking it
    # against the model's manifest; every measure (the paper's, exact baselines, geometry, post-processed
    # variants) comes from that one read. The units name the tokens carrying massive activations.
    input:
        layer=f"{RESULTS}/embeddings/{{model}}/layers/layer_{{layer}}.h5",
        shards=expand_shards(f"{RESULTS}/embeddings/{{model}}/shards/shard_{{shard}}.h5"),
        manifest=rules.gather.output.manifest,
        occurrences=rules.plan.output.occurrences,
        units=rules.plan.output.units,
    output:
        record=f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.json",
        words=f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.words.parquet",
        pcs=f"{RESULTS}/metrics/{{model}}/pcs/layer_{{layer}}.txt",
    params:
        metrics=config["metrics"],
        seed=config["seed"],
    resources:
        mem_mb=measure_mem_mb,
    log:
        "logs/metrics/{model}/layer_{layer}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/measure_layer.py"


rule measure:
    # Joins the per-layer results, after checking they cover exactly the manifest's layers.
    input:
        records=every_layer(f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.json"),
        words=every_layer(f"{RESULTS}/metrics/{{model}}/per_layer/layer_{{layer}}.words.parquet"),
        manifest=rules.gather.output.manifest,
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
        top_k=config["metrics"]["top_k_words"],
    log:
        "logs/metrics/{model}/combine.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/combine_layers.py"


rule figures:
    # Figures 1-4 of the paper, every model in each.
    input:
        layers=expand(f"{RESULTS}/metrics/{{model}}/layers.parquet", model=MODELS),
    output:
        **{
            f"{name}_{ext}": report(
                f"{RESULTS}/figures/{name}.{ext}",
                caption=f"../report/fig_{name}.rst",
                category="Figures",
                labels={"figure": name, "format": ext},
            )
            for name in FIGURES
            for ext in ("png", "pdf")
        },
    params:
        models=MODELS,
        labels=MODEL_LABELS,
        x_axis=config["figures"]["x_axis"],
    log:
        "logs/figures/figures.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/figures.py"


rule model_figures:
    # One model's geometry dashboard and its rogue dimensions across layers.
    input:
        layers=rules.measure.output.layers_parquet,
        postprocess=rules.measure.output.postprocess,
        rogue=rules.measure.output.rogue,
    output:
        **{
            f"{name}_{ext}": report(
                f"{RESULTS}/figures/{{model}}/{name}.{ext}",
                caption=f"../report/fig_{name}.rst",
                category="Figures",
                subcategory="Per model",
                labels={"model": "{model}", "figure": name, "format": ext},
            )
            for name in MODEL_FIGURES
            for ext in ("png", "pdf")
        },
    params:
        label=lambda wildcards: MODEL_LABELS[wildcards.model],
        x_axis=config["figures"]["x_axis"],
    log:
        "logs/figures/{model}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/model_figures.py"


rule summary:
    # This run beside the paper, and the paper's claims (Table 1's ordering, claim A9, from Table 1's scores).
    input:
        layers=expand(f"{RESULTS}/metrics/{{model}}/layers.parquet", model=MODELS),
        words=expand(f"{RESULTS}/metrics/{{model}}/words.parquet", model=MODELS),
        losses=expand(f"{RESULTS}/embeddings/{{model}}/losses.json", model=MODELS),
        table1=[f"{RESULTS}/tables/table1.csv"] if config["static"]["enabled"] else [],
    output:
        summary_md=report(
            f"{RESULTS}/tables/summary.md",
            caption="../report/summary.rst",
            category="Tables",
            subcategory="Summary",
            labels={"table": "summary", "format": "markdown"},
        ),
        summary_tex=f"{RESULTS}/tables/summary.tex",
        claims_md=report(
            f"{RESULTS}/tables/claims.md",
            caption="../report/claims.rst",
            category="Tables",
            subcategory="Claims",
            labels={"table": "claims", "format": "markdown"},
        ),
        claims_csv=f"{RESULTS}/tables/claims.csv",
        losses_csv=report(
            f"{RESULTS}/tables/losses.csv",
            caption="../report/losses.rst",
            category="Tables",
            subcategory="What could not be stored",
            labels={"table": "losses", "format": "csv"},
        ),
    params:
        models=MODELS,
        labels=MODEL_LABELS,
        paper_models=STANDS_FOR,
        sources=MODEL_SOURCES,
    log:
        "logs/figures/summary.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/summary.py"
