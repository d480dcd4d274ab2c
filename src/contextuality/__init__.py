"""contextuality: measure how contextual a language model's word representations are.

Reproduces Ethayarajh (EMNLP 2019) for any model. One subpackage per stage of the pipeline, each
importing only those listed before it:

* ``core``: what every stage shares (the settings, the results layout, job logging, atomic writes,
  disk reservations); ``paper``: everything the paper reports, as data;
* ``store``: the stored vectors (HDF5 shards, virtual layer files, the manifest, checksummed reads);
* ``corpus``: the STS sentences and the spaCy word index;
* ``models``: where weights come from (one class per source), safe loading, the smoke models, ELMo;
* ``extraction``: the plan of each model and the extraction of every layer's vectors;
* ``static``: static embeddings (the word2vec text format, the nine benchmarks of Table 1, scoring);
* ``measure``: the paper's reference definitions, the geometry beyond it, the one-read engine per layer;
* ``senses``: word senses (WordNet 3.0 offline, its usages as a labelled corpus, sense separation,
  clusterability, the polysemy regression, the output layer as a lens);
* ``report``: figures, the summary beside the paper, the claims, Table 1;
* ``workflow``: what the Snakefile imports (config checks, target checks, job estimates);
* ``notebook``: ``contextuality.study``, one model's measures from a notebook, on the device path's engine.

``contextuality.study`` imports it when first called, so ``import contextuality`` stays light.
"""

__version__ = "0.1.0"


def study(model, sentences=None, **keywords):
    """The paper's measures of one model on some sentences, in memory: ``contextuality.notebook.study.study`` (its
    keywords: tokenizer, config, options, device, panel), imported on the first call."""
    from contextuality.notebook.study import study as measure

    return measure(model, sentences, **keywords)
