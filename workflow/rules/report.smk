# What people read: the paper's four figures across models, each model's geometry figures, the summary
# beside the paper with the claims checked, and Table 1.


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
        layers=rules.combine_layers.output.layers_parquet,
        postprocess=rules.combine_layers.output.postprocess,
        rogue=rules.combine_layers.output.rogue,
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


rule table1:
    input:
        scores=expand(f"{RESULTS}/static/{{model}}/scores.csv", model=MODELS),
        baselines=expand(f"{RESULTS}/static/baselines/{{baseline}}.csv", baseline=sorted(config["static"]["baselines"])),
    output:
        csv=f"{RESULTS}/tables/table1.csv",
        md=report(
            f"{RESULTS}/tables/table1.md",
            caption="../report/table1.rst",
            category="Tables",
            subcategory="Table 1",
            labels={"table": "Table 1", "format": "markdown"},
        ),
        tex=f"{RESULTS}/tables/table1.tex",
        png=report(
            f"{RESULTS}/figures/table1_by_layer.png",
            caption="../report/fig_table1.rst",
            category="Figures",
            labels={"figure": "table1_by_layer", "format": "png"},
        ),
        pdf=f"{RESULTS}/figures/table1_by_layer.pdf",
    params:
        # display names are applied here, so renaming a model re-scores nothing
        labels=MODEL_LABELS,
    log:
        "logs/static/table1.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/table1.py"
