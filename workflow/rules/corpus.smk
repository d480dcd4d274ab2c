# The STS sentences (through `datasets`) and the spaCy word index.


localrules:
    corpus,  # seconds of work, and with `source: hub` a download: compute nodes often have no network


rule sts_pairs:
    # The bundled release files, parsed strictly into the JSON-lines form the `datasets` json builder loads.
    # Each file it reads is an input too: the folder's time does not change when a file inside is edited.
    input:
        release_dir=SETTINGS.corpus.bundled_dir,
        release_files=bundled_release_paths(
            SETTINGS.corpus.bundled_dir, SETTINGS.corpus.years, SETTINGS.corpus.include_2012_train
        ),
    output:
        pairs=layout.STS_PAIRS,
    params:
        years=list(SETTINGS.corpus.years),
        include_2012_train=SETTINGS.corpus.include_2012_train,
    log:
        "logs/corpus/sts_pairs.log",
    conda:
        "../../envs/corpus.yaml"
    script:
        "../scripts/sts_pairs.py"


if is_sts(SETTINGS.corpus.source):

    rule corpus:
        input:
            pairs=branch(SETTINGS.corpus.source == "bundled", then=rules.sts_pairs.output.pairs, otherwise=[]),
            # the release files again, for the record's digests (sts_pairs parsed them)
            release_files=branch(
                SETTINGS.corpus.source == "bundled", then=rules.sts_pairs.input.release_files, otherwise=[]
            ),
        output:
            sentences=layout.SENTENCES,
            record=layout.CORPUS_RECORD,
        params:
            source=SETTINGS.corpus.source,
            years=list(SETTINGS.corpus.years),
            include_2012_train=SETTINGS.corpus.include_2012_train,
            max_sentences=SETTINGS.corpus.max_sentences,
            hub_revisions=SETTINGS.corpus.hub_revisions,
        log:
            "logs/corpus/corpus.log",
        benchmark:
            layout.CORPUS_BENCHMARK
        conda:
            "../../envs/corpus.yaml"
        script:
            "../scripts/corpus.py"

else:

    rule corpus:
        # Any other corpus: a text file, a table or a dataset (corpus.sources), with the STS corpus's cleaning,
        # stable ids and a record of its input's digest. A path a rule makes (the WordNet glosses) is made first.
        input:
            corpus=branch(SETTINGS.corpus.path is not None, then=SETTINGS.corpus.path, otherwise=[]),
            # a dataset folder's files: each is read (and digested), and editing one leaves the folder's time alone
            files=dataset_folder_files(SETTINGS.corpus),
        output:
            sentences=layout.SENTENCES,
            record=layout.CORPUS_RECORD,
        params:
            corpus=as_params(SETTINGS.corpus),
        log:
            "logs/corpus/corpus.log",
        benchmark:
            layout.CORPUS_BENCHMARK
        conda:
            "../../envs/corpus.yaml"
        script:
            "../scripts/corpus_source.py"


rule words:
    input:
        sentences=rules.corpus.output.sentences,
    output:
        words=layout.SPACY_WORDS,
        index=layout.WORD_INDEX,
    params:
        words=as_params(SETTINGS.words),
    log:
        "logs/corpus/words.log",
    benchmark:
        layout.WORDS_BENCHMARK
    # before the models are built: a corpus with no word to measure stops the run within seconds
    priority: 10
    conda:
        "../../envs/corpus.yaml"
    script:
        "../scripts/words.py"
