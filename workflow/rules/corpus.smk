# The STS sentences (through `datasets`) and the spaCy word index.


localrules:
    corpus,  # seconds of work, and with `source: hub` a download: compute nodes often have no network


rule sts_pairs:
    # The bundled release files, parsed strictly into the JSON-lines form the `datasets` json builder loads.
    input:
        release_dir=config["corpus"]["bundled_dir"],
    output:
        pairs=f"{RESULTS}/corpus/sts_pairs.jsonl",
    params:
        years=config["corpus"]["years"],
        include_2012_train=config["corpus"]["include_2012_train"],
    log:
        "logs/corpus/sts_pairs.log",
    conda:
        "../../envs/corpus.yaml"
    script:
        "../scripts/sts_pairs.py"


rule corpus:
    input:
        pairs=branch(
            config["corpus"]["source"] == "bundled", then=rules.sts_pairs.output.pairs, otherwise=[]
        ),
    output:
        sentences=f"{RESULTS}/corpus/sentences.parquet",
    params:
        source=config["corpus"]["source"],
        years=config["corpus"]["years"],
        include_2012_train=config["corpus"]["include_2012_train"],
        max_sentences=config["corpus"]["max_sentences"],
        hub_revisions=config["corpus"]["hub_revisions"],
    log:
        "logs/corpus/corpus.log",
    conda:
        "../../envs/corpus.yaml"
    script:
        "../scripts/corpus.py"


rule words:
    input:
        sentences=rules.corpus.output.sentences,
    output:
        words=f"{RESULTS}/corpus/spacy_words.parquet",
        index=f"{RESULTS}/corpus/word_index.parquet",
    params:
        min_occurrences=config["words"]["min_occurrences"],
        count_mode=config["words"]["count"],
    log:
        "logs/corpus/words.log",
    # before the models are built: a corpus with no word to measure stops the run within seconds
    priority: 10
    conda:
        "../../envs/corpus.yaml"
    script:
        "../scripts/words.py"
