"""The files of a run as the rules name them: what `snakemake` builds by default (``RunFiles.final``) and the rules'
input functions (every shard, every layer, what a layer was measured on, ...), from the run's settings.

Layer counts may come from a checkpoint (a downloaded model's build): ``built_record(model)`` gives the model's
source.json once built and raises Snakemake's ``IncompleteCheckpointException`` before; the Snakefile passes its
checkpoint's, a test a plain function.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from contextuality.core import layout
from contextuality.core.settings import Settings
from contextuality.corpus.sources import folder_files, is_sts
from contextuality.corpus.sts import bundled_release_paths
from contextuality.measure.device.parts import part_of_layer
from contextuality.models.sources import SOURCES


def filled(files, **values) -> list:
    """``files`` (a rule's declared outputs) with their wildcards filled in, for every combination of ``values``.

    Not ``expand``: with a default storage provider (--default-storage-provider) a rule's outputs carry their
    storage object, which expand refuses; ``apply_wildcards`` keeps it. A plain string is formatted.
    """
    names = list(values)
    filled_in = []
    for combination in itertools.product(*values.values()):
        wildcards = dict(zip(names, map(str, combination)))
        filled_in += [_apply(file, wildcards) for file in files]
    return filled_in


def _apply(file, wildcards: dict):
    return file.apply_wildcards(wildcards) if hasattr(file, "apply_wildcards") else file.format(**wildcards)


def in_corpus(pattern: str, corpus: str) -> str:
    """``pattern`` of ``corpus``, its other wildcards left for the rule's (``{model}``)."""
    return pattern.replace("{corpus}", corpus)


def pair_files(pattern: str, wildcards) -> list[str]:
    """``pattern`` of the wildcards' corpus for model_a, then model_b."""
    return [
        layout.path(pattern, corpus=wildcards.corpus, model=model) for model in (wildcards.model_a, wildcards.model_b)
    ]


def dataset_folder_files(corpus) -> list[str]:
    """Every file of a local `datasets` corpus folder as it is now ([] for other sources, or a folder a rule makes)."""
    if corpus.source != "datasets" or corpus.path is None or not Path(corpus.path).is_dir():
        return []
    return [str(path) for path in folder_files(corpus.path)]


class RunFiles:
    """The run's files from ``settings``; ``built_record`` as the module says."""

    def __init__(self, settings: Settings, built_record: Callable[[str], str] | None = None):
        self.settings, self.built_record = settings, built_record
        self.models, self.corpora = list(settings.models), list(settings.corpora)
        self.on_device = settings.metrics.device.on_device

    # --- layers, shards and the store

    def n_layers(self, model: str) -> int:
        """Layers a model returns (input layer included): a random model's from its config, any other's from its
        source.json once built (the build is a checkpoint: the DAG's layer files follow from it)."""
        settings = self.settings.models[model]
        source = SOURCES[settings.source]
        record = layout.path(layout.MODEL_RECORD, model=model)
        if not source.layers_in_config and self.built_record is not None:
            record = self.built_record(model)
        return source.layer_count(settings.build, record)

    def stored_layers(self, model: str) -> range | None:
        """The layers of a model, once its layer count is known, else None.

        Not yet known (a downloaded model not built): nothing is asked here, and the model is built and its layers
        extracted for its measurements; asking here would wait for each model's build in turn.
        """
        from snakemake.exceptions import IncompleteCheckpointException

        try:
            return range(self.n_layers(model))
        except IncompleteCheckpointException:
            return None

    def expand_shards(self, pattern: str, corpus: str | None = None) -> Callable:
        """Input function: ``pattern`` for every shard of the wildcards' model, of the wildcards' corpus (or
        ``corpus``)."""

        def shard_files(wildcards):
            model, name = self.settings.models[wildcards.model], corpus or wildcards.corpus
            return [layout.path(pattern, corpus=name, model=model.key, shard=shard) for shard in range(model.n_shards)]

        return shard_files

    def every_layer(self, pattern: str, corpus: str | None = None) -> Callable:
        """Input function: ``pattern`` for every layer of the wildcards' model, of the wildcards' corpus (or
        ``corpus``)."""

        def files(wildcards):
            name = corpus or getattr(wildcards, "corpus", None)
            return [layout.path(pattern, corpus=name, model=wildcards.model, layer=layer)
                    for layer in range(self.n_layers(wildcards.model))]  # fmt: skip

        return files

    def store_files(self, wildcards=None) -> list[str]:
        """Input function: every model's store (`snakemake store`): shards, manifest and layer files."""
        files = []
        for corpus, model in itertools.product(self.corpora, self.models):
            wildcards = SimpleNamespace(corpus=corpus, model=model)
            files += self.expand_shards(layout.SHARD)(wildcards)
            files += [layout.path(layout.MANIFEST, corpus=corpus, model=model)]
            files += self.every_layer(layout.LAYER_FILE)(wildcards)
        return files

    # --- what `snakemake` builds by default

    def final(self, rules) -> list:
        """Everything `snakemake` builds by default: every file a job writes under results/ (``rules``: Snakemake's
        rules; an input function's, as layer counts may come from a checkpoint).

        Snakemake rebuilds a missing file only when something asks for it: a deleted output that no target names (a
        figure's PDF, claims.csv, a model's words.parquet) would pass unnoticed behind the files that are there. So
        every deliverable is a target, taken from the rules' own outputs; the stored vectors too, so a deleted shard
        or layer file is rebuilt (with what depends on it) instead of passing behind newer tables.
        """
        settings = self.settings
        targets = [*rules.figures.output, *rules.summary.output, *rules.report_pages.output]
        for name, corpus in settings.corpora.items():
            targets += filled(rules.corpus.output, corpus=[name]) + filled(rules.words.output, corpus=[name])
            if is_sts(corpus.source):  # the STS corpus's pairs and gold scores
                targets += filled(rules.sts_pairs.output, corpus=[name])
        if settings.static.enabled:
            targets += [*rules.table1.output]
            targets += filled(rules.static_baseline_scores.output, baseline=settings.static.baselines)
        if settings.senses.enabled:
            names = ("wordnet", "sense_inventory", "sense_usages", "context_diversity", "tagger", "sense_tags",
                     "senses_figures")  # fmt: skip
            targets += [file for name in names for file in getattr(rules, name).output]
        for model in self.models:
            targets += self.model(rules, model)
        return targets + (self.similarity(rules) if settings.similarity.enabled else [])

    def similarity(self, rules) -> list:
        """The similarity stage's files of every measured corpus: its rows, each model's sample and tables, and one
        table per pair of models."""
        targets = []
        for corpus in self.corpora:
            targets += filled(rules.similarity_rows.output, corpus=[corpus])
            targets += filled(rules.similarity_sample.output, corpus=[corpus], model=self.models)
            targets += filled(rules.similarity_model.output, corpus=[corpus], model=self.models)
            targets += [layout.path(layout.SIMILARITY_PAIR, corpus=corpus, model_a=a, model_b=b)
                        for a, b in itertools.combinations(self.models, 2)]  # fmt: skip
        return targets + [*rules.similarity_figures.output, *rules.atlas.output]

    def model(self, rules, model: str) -> list:
        """Every file under results/ of one model: of each corpus its plan, vectors (when the run stores them) and
        measurements; of the study's corpus its figures, scores and sense measures; and the usages' plan and
        store."""
        main = self.settings.corpus.name
        targets = filled(rules.model_figures.output, model=[model])
        targets += filled(rules.model_pages.output, corpus=[main], model=[model])
        targets += filled(rules.static_scores.output, model=[model]) if self.settings.static.enabled else []
        for corpus in self.corpora:
            targets += self.corpus_model(rules, corpus, model, measured=True)
        if self.settings.senses.enabled:
            targets += filled(rules.measure_senses.output, corpus=[main], model=[model])
            targets += self.corpus_model(rules, layout.USAGES_CORPUS, model, measured=False)
        return targets

    def corpus_model(self, rules, corpus: str, model: str, measured: bool) -> list:
        """One model's files of one corpus: its plan and store (when the run stores them, or for the usages'
        corpus, which the sense measures read from the store unless they compute it on the device), and when
        ``measured`` its per-layer measures, tables and export."""
        settings = self.settings
        stores = settings.stores or not (measured or self.on_device)  # the usages' for the senses
        per_model = [rules.plan] + ([rules.manifest] if stores else [])
        per_model += [rules.combine_layers] if measured else []
        per_model += [rules.export_classic] if measured and settings.extraction.export_classic else []
        targets = [path for rule in per_model for path in filled(rule.output, corpus=[corpus], model=[model])]
        if measured and self.on_device:
            parts = range(settings.metrics.device.device_parts)
            targets += filled(rules.measure_model.output, corpus=[corpus], model=[model], part=parts)
        layers = self.stored_layers(model)
        if layers is None:
            return targets
        shards, labels = range(settings.models[model].n_shards), [layout.layer_label(layer) for layer in layers]
        targets += filled(self.per_layer_rule(rules).output, corpus=[corpus], model=[model], layer=labels) if measured else []  # fmt: skip
        if stores:
            targets += filled(rules.extract.output, corpus=[corpus], model=[model], shard=shards)
            targets += filled(rules.layer_file.output, corpus=[corpus], model=[model], layer=labels)
        return targets

    def per_layer_rule(self, rules):
        """Which of measure_layer and device_layer writes each layer's record, words and PC vectors."""
        return rules.device_layer if self.on_device else rules.measure_layer

    def per_layer_order(self) -> tuple[str, str]:
        """The rule that writes a layer's files, then the one it goes before (the Snakefile's ``ruleorder``)."""
        return ("device_layer", "measure_layer") if self.on_device else ("measure_layer", "device_layer")

    # --- the rules' input functions

    def download_for_model(self, wildcards):
        """The download a model's build needs; a model built from its config alone (random) has none."""
        if SOURCES[self.settings.models[wildcards.model].source].downloads:
            return layout.path(layout.MODEL_DOWNLOAD, model=wildcards.model)
        return []

    def needs_corpus_for_model(self, wildcards) -> bool:
        return SOURCES[self.settings.models[wildcards.model].source].needs_corpus

    def sts_release_inputs(self, wildcards) -> dict:
        """The bundled release folder of the wildcards' corpus and each file sts_pairs reads in it."""
        corpus = self.settings.corpora[wildcards.corpus]
        files = bundled_release_paths(corpus.bundled_dir, corpus.years, corpus.include_2012_train)
        return {"release_dir": corpus.bundled_dir, "release_files": files}

    def corpus_inputs(self, wildcards) -> dict:
        """What the `corpus` job reads of the wildcards' corpus. A bundled STS corpus: its parsed pairs and (for the
        record's digests) the release files; any other: its file, or a dataset folder's files (each is read and
        digested, and editing one leaves the folder's time alone)."""
        corpus = self.settings.corpora[wildcards.corpus]
        inputs = {"pairs": [], "release_files": [], "corpus": [], "files": []}
        if corpus.source == "bundled":
            inputs["pairs"] = layout.path(layout.STS_PAIRS, corpus=corpus.name)
            inputs["release_files"] = self.sts_release_inputs(wildcards)["release_files"]
        elif not is_sts(corpus.source):
            inputs["corpus"] = corpus.path if corpus.path is not None else []
            inputs["files"] = dataset_folder_files(corpus)
        return inputs

    def device_part_of_layer(self, wildcards) -> str:
        """The device part's tar that holds the wildcards' layer (``measure.device.parts.part_layers``: consecutive
        layers)."""
        parts, layers = self.settings.metrics.device.device_parts, self.n_layers(wildcards.model)
        part = part_of_layer(int(wildcards.layer), layers, parts)
        return layout.path(layout.DEVICE_PART, corpus=wildcards.corpus, model=wildcards.model, part=part)

    def _of_parts(self, pattern: str, wildcards) -> list[str]:
        parts = range(self.settings.metrics.device.device_parts)
        return [layout.path(pattern, corpus=wildcards.corpus, model=wildcards.model, part=part) for part in parts]

    def measured_on(self, wildcards) -> list[str]:
        """What a model's layers were measured on: its manifest, or every device part's record."""
        if self.on_device:
            return self._of_parts(layout.DEVICE_RECORD, wildcards)
        return [layout.path(layout.MANIFEST, corpus=wildcards.corpus, model=wildcards.model)]

    def device_made_from(self, wildcards) -> list[str]:
        """On the device path, what the run's rows are made from (source.json and the plan's files), which each
        part's record must match; none on the store path (its manifest is checked against them)."""
        if not self.on_device:
            return []
        files = (layout.MODEL_RECORD, layout.TOKENS, layout.UNITS)
        return [layout.path(pattern, corpus=wildcards.corpus, model=wildcards.model) for pattern in files]

    def store_manifest_beside_device(self, wildcards):
        """The manifest, when the layers were measured on the device and the run stores them too (the combining
        step checks that the two were made from the same)."""
        if self.on_device and self.settings.stores:
            return layout.path(layout.MANIFEST, corpus=wildcards.corpus, model=wildcards.model)
        return []

    def similarity_sample_inputs(self, wildcards) -> dict:
        """What a model's similarity sample is gathered from: the device parts' samples (metrics.on_device), else
        every layer file of the store with its shards and manifest."""
        if self.on_device:
            return {"parts": self._of_parts(layout.DEVICE_SAMPLE, wildcards)}
        return {
            "layers": self.every_layer(layout.LAYER_FILE)(wildcards),
            "shards": self.expand_shards(layout.SHARD)(wildcards),
            "manifest": layout.path(layout.MANIFEST, corpus=wildcards.corpus, model=wildcards.model),
        }

    def store_sense_inputs(self) -> dict:
        """The sense job's store inputs: every layer file, shard and manifest of both corpora (none on the device
        path, whose job computes the layers)."""
        if self.on_device:
            return {}
        usages = layout.USAGES_CORPUS
        return {
            "layers": self.every_layer(layout.LAYER_FILE),
            "shards": self.expand_shards(layout.SHARD),
            "manifest": layout.MANIFEST,
            "senses_layers": self.every_layer(layout.LAYER_FILE, corpus=usages),
            "senses_shards": self.expand_shards(layout.SHARD, corpus=usages),
            "senses_manifest": in_corpus(layout.MANIFEST, usages),
        }

    def usage_source_inputs(self) -> dict:
        """The sense usages' corpus files when they come from a sense-tagged corpus (senses.usages.source:
        wsd_xml): its XML and gold key; none for WordNet's examples (so a default run's job keeps its inputs)."""
        usages = self.settings.sense_usages
        if usages["source"] != "wsd_xml":
            return {}
        return {"wsd_xml": usages["xml"], "wsd_gold_key": usages["gold_key"]}
