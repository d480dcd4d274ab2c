# Every corpus's sentences (the STS corpus through `datasets`, any other from its file, table or dataset) and
# its spaCy word index, each in its own folder (results/corpora/{corpus}/).


localrules:
    corpus,  # seconds of work, and with `source: hub` a download: compute nodes often have no network
    sts_pairs,  # the bundled release files parsed: seconds


rule sts_pairs:
    # The bundled release files, parsed strictly into the JSON-lines form the `datasets` json builder loads.
    # Each file it reads is an input too: the folder's time does not change when a file inside is edited.
    input:
        unpack(FILES.sts_release_inputs),
    output:
        pairs=layout.STS_PAIRS,
    log:
        layout.STS_PAIRS_LOG,
    wildcard_constraints:
        corpus=CONFIGURED_CORPORA,
    conda:
        "../../envs/corpus.yaml"
    params:
        years=lambda wildcards: list(SETTINGS.corpora[wildcards.corpus].years),
        include_2012_train=lambda wildcards: SETTINGS.corpora[wildcards.corpus].include_2012_train,
    script:
        "../scripts/sts_pairs.py"


rule corpus:
    # The STS pairs (bundled, or from the hub), or any other corpus: a text file, a table or a dataset
    # (corpus.sources), with the STS corpus's cleaning, stable ids and a record of its inputs' digests.
    # A path a rule makes (the WordNet glosses) is made first.
    input:
        unpack(FILES.corpus_inputs),
    output:
        sentences=layout.SENTENCES,
        record=layout.CORPUS_RECORD,
    log:
        layout.CORPUS_LOG,
    benchmark:
        layout.CORPUS_BENCHMARK
    wildcard_constraints:
        corpus=CONFIGURED_CORPORA,
    conda:
        "../../envs/corpus.yaml"
    params:
        corpus=lambda wildcards: as_params(SETTINGS.corpora[wildcards.corpus]),
    script:
        "../scripts/corpus.py"


rule words:
    input:
        sentences=layout.SENTENCES,
    output:
        words=layout.SPACY_WORDS,
        index=layout.WORD_INDEX,
    log:
        layout.WORDS_LOG,
    benchmark:
        layout.WORDS_BENCHMARK
    wildcard_constraints:
        corpus=CONFIGURED_CORPORA,
    # before the models are built: a corpus with no word to measure stops the run within seconds
    priority: 10
    conda:
        "../../envs/corpus.yaml"
    params:
        words=as_params(SETTINGS.words),
    script:
        "../scripts/words.py"
