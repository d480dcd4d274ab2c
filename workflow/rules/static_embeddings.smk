# Table 1's scores: each layer's static embeddings (every word's first principal component) on nine word benchmarks.


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
