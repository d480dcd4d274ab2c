# Materialise each configured model once into resources/models/{model}/ (downloads happen here only).


localrules:
    models,


rule models:
    input:
        # only a 'random' model needs the corpus (its tokenizer is trained on the sentences)
        sentences=branch(needs_corpus_for_model, then=rules.corpus.output.sentences, otherwise=[]),
    output:
        record="resources/models/{model}/source.json",
    params:
        spec=model_spec,
        seed=config["seed"],
    log:
        "logs/models/{model}.log",
    conda:
        "../../envs/models.yaml"
    script:
        "../scripts/models.py"
