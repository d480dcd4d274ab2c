# Similarity across layers and models of a corpus (results/similarity/{corpus}/): the indexed occurrences every
# model stores (one explicit join on sentence_id and word position, never row numbers), each model's rows of a
# seeded sample of them, its within-model tables, one table per pair of models, the heat maps, and the atlas.


localrules:
    similarity_rows,
    similarity_figures,  # small tables drawn and written out: seconds (report.smk)
    atlas,


rule similarity_rows:
    # Seconds: the corpus's indexed occurrences that every model stores, with each model's first row and piece
    # count, in corpus order with a seeded draw (the sample is a prefix of it), and what each model loses.
    input:
        word_index=layout.WORD_INDEX,
        units=lambda wildcards: [layout.path(layout.UNITS, corpus=wildcards.corpus, model=m) for m in MODELS],
        tokens=lambda wildcards: [layout.path(layout.TOKENS, corpus=wildcards.corpus, model=m) for m in MODELS],
    output:
        rows=layout.SIMILARITY_ROWS,
        record=layout.SIMILARITY_ROWS_RECORD,
    log:
        layout.SIMILARITY_ROWS_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        models=MODELS,
        seed=SETTINGS.seed,
    script:
        "../scripts/similarity_rows.py"


rule similarity_sample:
    # A model's rows of the sample, every layer: gathered from the store (each layer file read once, checked
    # against the manifest), or joined from what measure_model gathered on the device (metrics.on_device).
    input:
        unpack(FILES.similarity_sample_inputs),
        rows=rules.similarity_rows.output.rows,
    output:
        sample=layout.SIMILARITY_SAMPLE,
    log:
        layout.SIMILARITY_SAMPLE_LOG,
    benchmark:
        layout.SIMILARITY_SAMPLE_BENCHMARK
    conda:
        "../../envs/analysis.yaml"
    params:
        pooling=PARAMS.similarity_pooling,
        max_rows=SETTINGS.similarity.max_rows,
    script:
        "../scripts/similarity_sample.py"


rule similarity_model:
    # Every pair of a model's layers, every variant: CKA (biased, debiased), Procrustes, mutual k-NN, the
    # permutation null of each layer's best match; on the job's GPU when it has one.
    input:
        sample=rules.similarity_sample.output.sample,
        rows=rules.similarity_rows.output.rows,
    output:
        layers=layout.SIMILARITY_LAYERS,
        knn=layout.SIMILARITY_KNN,
    log:
        layout.SIMILARITY_MODEL_LOG,
    benchmark:
        layout.SIMILARITY_MODEL_BENCHMARK
    conda:
        "../../envs/device.yaml"
    threads: SETTINGS.extraction.threads
    resources:
        gpu=GPUS.device_measure,
        mem_mb=lambda wildcards, input, attempt: JOBS.similarity_mem_mb([input.sample], attempt),
    params:
        similarity=PARAMS.similarity,
        seed=SETTINGS.seed,
        memory_mb=SETTINGS.metrics.measure.memory_mb,
    script:
        "../scripts/similarity_model.py"


rule similarity_pair:
    # Every layer of model_a against every layer of model_b (model_a before model_b by key), every variant.
    input:
        samples=lambda wildcards: pair_files(layout.SIMILARITY_SAMPLE, wildcards),
        knn=lambda wildcards: pair_files(layout.SIMILARITY_KNN, wildcards),
        rows=rules.similarity_rows.output.rows,
    output:
        pair=layout.SIMILARITY_PAIR,
    log:
        layout.SIMILARITY_PAIR_LOG,
    benchmark:
        layout.SIMILARITY_PAIR_BENCHMARK
    wildcard_constraints:
        model_a="|".join(MODELS) if MODELS else "(?!)",
        model_b="|".join(MODELS) if MODELS else "(?!)",
    conda:
        "../../envs/device.yaml"
    threads: SETTINGS.extraction.threads
    resources:
        gpu=GPUS.device_measure,
        mem_mb=lambda wildcards, input, attempt: JOBS.similarity_mem_mb(input.samples, attempt),
    params:
        similarity=PARAMS.similarity,
        seed=SETTINGS.seed,
        memory_mb=SETTINGS.metrics.measure.memory_mb,
    script:
        "../scripts/similarity_pair.py"


rule similarity_figures:
    # The study corpus's heat maps: each model's layers against each other, and each pair of models.
    input:
        within=expand(layout.SIMILARITY_LAYERS, corpus=MAIN_CORPUS, model=MODELS),
        pairs=[
            layout.path(layout.SIMILARITY_PAIR, corpus=MAIN_CORPUS, model_a=a, model_b=b)
            for a, b in PARAMS.model_pairs
        ],
    output:
        **{
            f"{model}_{ext}": layout.path(layout.MODEL_FIGURE, model=model, name="similarity", ext=ext)
            for model in MODELS
            for ext in FIGURE_FORMATS
        },
        **{f"pairs_{ext}": layout.path(layout.FIGURE, name="similarity_pairs", ext=ext) for ext in FIGURE_FORMATS},
        **{
            f"{model}_page": shown(
                layout.path(layout.MODEL_FIGURE, model=model, name="similarity", ext="page.html"),
                "similarity",
                f"layer similarity within: {model}",
            )
            for model in MODELS
        },
        pairs_page=shown(
            layout.path(layout.FIGURE, name="similarity_pairs", ext="page.html"),
            "similarity_pairs",
            "layer similarity across models",
        ),
    log:
        layout.SIMILARITY_FIGURES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        models=MODELS,
        labels=inert_json(PARAMS.model_labels),
    script:
        "../scripts/similarity_figures.py"


rule atlas:
    # Seconds: every model of the run on one page, on relative depth: one row per model (anisotropy, context-
    # specificity, MEV, rogue dimensions, the senses answers, CKA within and across), its curves and two figures.
    input:
        layers=expand(layout.LAYERS_CSV, corpus=MAIN_CORPUS, model=MODELS),
        rogue=expand(layout.ROGUE, corpus=MAIN_CORPUS, model=MODELS),
        losses=expand(layout.LOSSES, corpus=MAIN_CORPUS, model=MODELS),
        records=expand(layout.MODEL_RECORD, model=MODELS),
        senses=expand(layout.SENSE_LAYERS, corpus=MAIN_CORPUS, model=MODELS) if SETTINGS.senses.enabled else [],
        claims=layout.path(layout.TABLE, name="claims", ext="csv"),
        within=expand(layout.SIMILARITY_LAYERS, corpus=MAIN_CORPUS, model=MODELS),
        pairs=[
            layout.path(layout.SIMILARITY_PAIR, corpus=MAIN_CORPUS, model_a=a, model_b=b)
            for a, b in PARAMS.model_pairs
        ],
    output:
        csv=layout.path(layout.TABLE, name="atlas", ext="csv"),
        md=layout.path(layout.TABLE, name="atlas", ext="md"),
        html=shown(
            layout.path(layout.TABLE, name="atlas", ext="html"), "atlas", "the atlas (table)", caption="atlas.rst"
        ),
        curves=layout.path(layout.TABLE, name="atlas_curves", ext="csv"),
        figure=[layout.path(layout.FIGURE, name="atlas", ext=ext) for ext in FIGURE_FORMATS],
        cka_figure=[layout.path(layout.FIGURE, name="atlas_cka", ext=ext) for ext in FIGURE_FORMATS],
        figure_page=shown(layout.path(layout.FIGURE, name="atlas", ext="page.html"), "atlas", "the atlas (figure)"),
        cka_page=shown(
            layout.path(layout.FIGURE, name="atlas_cka", ext="page.html"), "atlas_cka", "the atlas's CKA maps"
        ),
    log:
        layout.ATLAS_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        models=inert_json(
            [
                {"key": key, "label": m.label, "training": m.training, "stands_for": m.stands_for}
                for key, m in SETTINGS.models.items()
            ]
        ),
        pairs=[list(pair) for pair in PARAMS.model_pairs],
    script:
        "../scripts/atlas.py"
