# What people read: the paper's four figures across models, each model's geometry figures, the summary
# beside the paper with the claims checked, and Table 1. Labels and identities from the config travel as inert JSON
# (contextuality.report.inert): report.html prints these rules' params inside a <script> element.
from contextuality.report.inert import inert_json


# Small tables drawn and written out in seconds: on a cluster, each as a job of its own would wait longer in the
# queue than it runs, and start Snakemake twice on its node.
localrules:
    figures,
    model_figures,
    summary,
    table1,
    report_pages,
    model_pages,


rule figures:
    # Figures 1-4 of the paper, every model in each.
    input:
        layers=expand(layout.LAYERS_PARQUET, corpus=MAIN_CORPUS, model=MODELS),
    output:
        **{
            f"{name}_{ext}": layout.path(layout.FIGURE, name=name, ext=ext)
            for name in FIGURES
            for ext in FIGURE_FORMATS
        },
        **{
            f"{name}_page": shown(
                layout.path(layout.FIGURE, name=name, ext="page.html"),
                name,
                f"Figure {number}: {name.replace('_', ' ')}",
            )
            for number, name in enumerate(FIGURES, start=1)
        },
    log:
        layout.FIGURES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        models=MODELS,
        labels=inert_json(PARAMS.model_labels),
        x_axis=SETTINGS.figures.x_axis,
    script:
        "../scripts/figures.py"


rule model_figures:
    # One model's geometry dashboard and its rogue dimensions across layers.
    input:
        layers=in_corpus(layout.LAYERS_PARQUET, MAIN_CORPUS),
        postprocess=in_corpus(layout.POSTPROCESS, MAIN_CORPUS),
        rogue=in_corpus(layout.ROGUE, MAIN_CORPUS),
    output:
        **{
            f"{name}_{ext}": layout.path(layout.MODEL_FIGURE, model="{model}", name=name, ext=ext)
            for name in MODEL_FIGURES
            for ext in FIGURE_FORMATS
        },
        **{
            f"{name}_page": shown(
                layout.path(layout.MODEL_FIGURE, model="{model}", name=name, ext="page.html"),
                name,
                f"{name.replace('_', ' ')}: {{model}}",
            )
            for name in MODEL_FIGURES
        },
    log:
        layout.MODEL_FIGURES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        label=lambda wildcards: inert_json(PARAMS.model_labels[wildcards.model]),
        x_axis=SETTINGS.figures.x_axis,
    script:
        "../scripts/model_figures.py"


rule summary:
    # This run beside the paper, and the paper's claims (Table 1's ordering, claim A9, from Table 1's scores).
    input:
        layers=expand(layout.LAYERS_PARQUET, corpus=MAIN_CORPUS, model=MODELS),
        words=expand(layout.WORDS, corpus=MAIN_CORPUS, model=MODELS),
        losses=expand(layout.LOSSES, corpus=MAIN_CORPUS, model=MODELS),
        table1=[layout.path(layout.TABLE, name="table1", ext="csv")] if SETTINGS.static.enabled else [],
        senses=expand(layout.SENSE_LAYERS, corpus=MAIN_CORPUS, model=MODELS) if SETTINGS.senses.enabled else [],
        # a corpus other than STS: claims.md says that the paper measured STS, and why pairs and gold are absent
        corpus=branch(
            is_sts(SETTINGS.corpus.source), then=[], otherwise=layout.path(layout.CORPUS_RECORD, corpus=MAIN_CORPUS)
        ),
    output:
        summary_md=layout.path(layout.TABLE, name="summary", ext="md"),
        summary_tex=layout.path(layout.TABLE, name="summary", ext="tex"),
        claims_md=layout.path(layout.TABLE, name="claims", ext="md"),
        claims_csv=layout.path(layout.TABLE, name="claims", ext="csv"),
        losses_csv=layout.path(layout.TABLE, name="losses", ext="csv"),  # in the report as a page (report_pages)
    log:
        layout.SUMMARY_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        models=MODELS,
        labels=inert_json(PARAMS.model_labels),
        paper_models=PARAMS.stands_for,
        sources=inert_json(PARAMS.model_sources),
        # each model's training (claim A3 names a sentence encoder's trained last layer)
        trainings={key: model.training for key, model in SETTINGS.models.items()},
    script:
        "../scripts/summary.py"


rule table1:
    input:
        scores=expand(layout.STATIC_SCORES, model=MODELS),
        baselines=expand(layout.BASELINE_SCORES, baseline=SETTINGS.static.baselines),
    output:
        csv=layout.path(layout.TABLE, name="table1", ext="csv"),
        md=layout.path(layout.TABLE, name="table1", ext="md"),
        tex=layout.path(layout.TABLE, name="table1", ext="tex"),
        png=layout.path(layout.FIGURE, name="table1_by_layer", ext="png"),
        pdf=layout.path(layout.FIGURE, name="table1_by_layer", ext="pdf"),
        page=shown(
            layout.path(layout.FIGURE, name="table1_by_layer", ext="page.html"),
            "table1_by_layer",
            "Table 1 by layer (figure)",
            caption="fig_table1.rst",
        ),
    log:
        layout.TABLE1_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        # display names are applied here, so renaming a model re-scores nothing
        labels=inert_json(PARAMS.model_labels),
    script:
        "../scripts/table1.py"


rule report_pages:
    # The answers as pages the report displays (it offers Markdown and csv only as downloads): the claims with
    # their verdicts, this run beside the paper, and Table 1.
    input:
        claims=rules.summary.output.claims_md,
        summary=rules.summary.output.summary_md,
        table1=[rules.table1.output.md] if SETTINGS.static.enabled else [],
        losses=rules.summary.output.losses_csv,
    output:
        **{
            name: shown(layout.path(layout.TABLE, name=name, ext="html"), name, title, caption=f"{name}.rst")
            for name, title in (
                ("claims", "the paper's claims, checked"),
                ("summary", "this run beside the paper"),
                ("losses", "occurrences each model could not measure"),
            )
            + ((("table1", "Table 1"),) if SETTINGS.static.enabled else ())
        },
    log:
        layout.REPORT_PAGES_LOG,
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/report_pages.py"


rule model_pages:
    # One model's tables as pages the report displays: its per-layer measurements (and its word senses by layer),
    # its post-processing table and its most context-specific words.
    input:
        layers=layout.LAYERS_CSV,
        postprocess=layout.POSTPROCESS,
        context_words=layout.CONTEXT_WORDS,
        # the word senses are measured on the study's corpus only
        senses=branch(
            lambda wildcards: SETTINGS.senses.enabled and wildcards.corpus == MAIN_CORPUS,
            then=[layout.SENSE_LAYERS],
            otherwise=[],
        ),
    output:
        layers=shown(layout.LAYERS_HTML, "layers", "every layer's measurements: {model}", caption="layers_table.rst"),
        postprocess=shown(
            layout.POSTPROCESS_HTML, "postprocess", "post-processing: {model}", caption="postprocess_table.rst"
        ),
        context_words=shown(
            layout.CONTEXT_WORDS_HTML, "context_words", "context-specific words: {model}", caption="context_words.rst"
        ),
    log:
        layout.MODEL_PAGES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        label=lambda wildcards: inert_json(PARAMS.model_labels[wildcards.model]),
    script:
        "../scripts/report_pages.py"
