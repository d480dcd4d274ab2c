# Table 1: static embeddings from each word's first principal component, scored on nine benchmarks.


rule static_scores:
    # One model's PC embeddings (every layer, layer 0 = the model's own static baseline) scored.
    input:
        pcs=every_layer(f"{RESULTS}/metrics/{{model}}/pcs/layer_{{layer}}.txt"),
        word_index=rules.words.output.index,
        benchmarks=config["static"]["benchmark_dir"],
    output:
        scores=f"{RESULTS}/static/{{model}}/scores.csv",
    params:
        seed=config["seed"],
    log:
        "logs/static/{model}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/static_scores.py"


rule static_baseline_scores:
    # A user-supplied static embedding (e.g. GloVe, FastText), trimmed to the same vocabulary.
    input:
        embedding=lambda wildcards: config["static"]["baselines"][wildcards.baseline],
        word_index=rules.words.output.index,
        benchmarks=config["static"]["benchmark_dir"],
    output:
        scores=f"{RESULTS}/static/baselines/{{baseline}}.csv",
    params:
        seed=config["seed"],
    log:
        "logs/static/baseline_{baseline}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/static_baseline_scores.py"


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
