# Table 1's scores: each layer's static embeddings (every word's first principal component) on nine word benchmarks.
# The benchmark files each scoring reads are inputs beside their folder (contextuality.static.benchmark_files):
# the folder's time does not change when a file inside is edited.


rule static_scores:
    # One model's PC embeddings (every layer, layer 0 = the model's own static baseline) scored.
    input:
        pcs=FILES.every_layer(layout.PCS, corpus=MAIN_CORPUS),
        word_index=layout.path(layout.WORD_INDEX, corpus=MAIN_CORPUS),
        benchmarks=SETTINGS.static.benchmark_dir,
        benchmark_files=benchmark_files(SETTINGS.static.benchmark_dir),
    output:
        scores=layout.STATIC_SCORES,
    log:
        layout.STATIC_SCORES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        seed=SETTINGS.seed,
    script:
        "../scripts/static_scores.py"


rule static_baseline_scores:
    # A user-supplied static embedding (e.g. GloVe, FastText), trimmed to the same vocabulary.
    input:
        embedding=lambda wildcards: SETTINGS.static.baselines[wildcards.baseline],
        word_index=layout.path(layout.WORD_INDEX, corpus=MAIN_CORPUS),
        benchmarks=SETTINGS.static.benchmark_dir,
        benchmark_files=benchmark_files(SETTINGS.static.benchmark_dir),
    output:
        scores=layout.BASELINE_SCORES,
    log:
        layout.STATIC_BASELINE_SCORES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        seed=SETTINGS.seed,
    script:
        "../scripts/static_baseline_scores.py"
