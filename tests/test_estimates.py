"""What the heavy jobs declare to the scheduler (contextuality.workflow.estimates), against the arithmetic of
docs/scaling.md."""

from __future__ import annotations

import dataclasses
import json

import pytest

from contextuality.workflow import estimates, run_need
from contextuality.workflow.schema import load_settings


def _settings(tmp_path, *, batch_size=64, n_shards=2, max_sentences=None, compute_dtype="float32", memory_mb=2048):
    return load_settings({
        "models": {"m": {"source": "hub", "id": "org/m", "revision": "0" * 40}},
        "extraction": {"batch_size": batch_size, "n_shards": n_shards},
        "corpus": {"max_sentences": max_sentences},
        "metrics": {"compute_dtype": compute_dtype, "memory_mb": memory_mb},
    })  # fmt: skip


def _record(tmp_path, weights_bytes: int, n_layers: int, dim: int):
    path = tmp_path / "source.json"
    path.write_text(json.dumps({"weights_bytes": weights_bytes, "n_layers": n_layers, "dim": dim}))
    return path


def test_extraction_memory_of_bert_base_is_the_documented_sum(tmp_path):
    """1000 + 2 x 440 + one batch of hidden states (654) + one window of pooled vectors (1309)."""
    settings = _settings(tmp_path)
    record = _record(tmp_path, 440_000_000, 13, 768)
    batch = 64 * 128 * 13 * 768 * 8 / 1e6
    window = 4 * 64 * 64 * 13 * 768 * 8 / 1e6
    assert batch == pytest.approx(654.3, abs=0.1) and window == pytest.approx(1308.6, abs=0.1)
    assert estimates.extraction_mem_mb(settings.models["m"], record) == int(1000 + 880 + batch + window) == 3842
    assert estimates.extraction_mem_mb(settings.models["m"], record, attempt=2) == int(
        2 * (1000 + 880 + batch + window)
    )


def test_extraction_memory_follows_the_models_own_batch_size_and_an_unbuilt_models_largest_shape(tmp_path):
    settings = load_settings({"models": {"m": {"source": "random", "architecture": "bert", "batch_size": 8}}})
    missing = tmp_path / "not-built" / "source.json"
    vector_bytes = 13 * 1024 * 4 * 2  # the paper's largest shape, before the model exists
    expected = 1000 + 8 * 128 * vector_bytes / 1e6 + 4 * 8 * 64 * vector_bytes / 1e6
    assert estimates.extraction_mem_mb(settings.models["m"], missing) == int(expected)


def test_extraction_memory_under_a_token_cap_holds_one_pass_of_that_many_tokens(tmp_path):
    """BERT-base, batch 64, max_batch_tokens 2048: 2048 x 13 x 768 x 8 / 1e6 = 164 MB of hidden states, not 654; a
    model's own cap wins; a cap under one sentence's 128 tokens still leaves room for a sentence running alone."""
    record = _record(tmp_path, 440_000_000, 13, 768)
    window = 4 * 64 * 64 * 13 * 768 * 8 / 1e6
    capped = load_settings(
        {
            "models": {"m": {"source": "hub", "id": "org/m", "revision": "0" * 40}},
            "extraction": {"max_batch_tokens": 2048},
        }
    ).models["m"]
    assert estimates.batch_tokens(capped) == 2048
    assert estimates.extraction_mem_mb(capped, record) == int(1000 + 880 + 2048 * 13 * 768 * 8 / 1e6 + window) == 3352
    own = load_settings(
        {
            "models": {"m": {"source": "hub", "id": "org/m", "revision": "0" * 40, "max_batch_tokens": 16}},
            "extraction": {"max_batch_tokens": 2048},
        }
    ).models["m"]
    assert own.max_batch_tokens == 16 and estimates.batch_tokens(own) == 128
    assert estimates.batch_tokens(_settings(tmp_path).models["m"]) == 64 * 128  # no cap: batch_size sentences


def test_extraction_runtime_of_smollm2_per_half_corpus_shard(tmp_path):
    """SmolLM2-135M: 12,544 x 15 x 135 / 34,500 = 736 s per shard of the full corpus; 10 + 2 x 12.3 min."""
    settings = _settings(tmp_path)
    record = _record(tmp_path, 135 * 4_000_000, 31, 576)
    assert estimates.shard_sentences(settings.models["m"], settings.corpus) == 12_544
    seconds = 12_544 * 15 * 135 / (1500 * 23)
    assert seconds == pytest.approx(736.3, abs=0.1)
    assert (
        estimates.extraction_runtime_min(settings.models["m"], settings.corpus, record)
        == int(10 + 2 * seconds / 60)
        == 34
    )
    assert estimates.extraction_runtime_min(settings.models["m"], settings.corpus, record, attempt=2) == 69


def test_extraction_runtime_of_a_shortened_corpus(tmp_path):
    settings = _settings(tmp_path, n_shards=4, max_sentences=120)
    record = _record(tmp_path, 23 * 4_000_000, 7, 384)
    # 120 sentences are one window (4 x 64): the shard jobs put them all in one shard, the others get none
    assert estimates.shard_sentences(settings.models["m"], settings.corpus) == 120
    assert estimates.extraction_runtime_min(settings.models["m"], settings.corpus, record) == 10


def test_the_sense_jobs_memory_from_the_manifest_in_the_dtype_it_reads(tmp_path):
    """The estimate was sized by metrics.compute_dtype, which the sense job never reads: it reads every layer in
    core.settings.SENSE_LAYER_DTYPE (float32), whatever the measurement's dtype."""
    import numpy as np

    from conftest import PROJECT
    from contextuality.core.settings import SENSE_LAYER_DTYPE

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"rows": 309_088, "dim": 384}))
    assert np.dtype(SENSE_LAYER_DTYPE).itemsize == 4
    assert estimates.whole_layer_mem_mb(manifest) == int(309_088 * 384 * 4 / 1e6 + 384 + 1024) == 1882
    assert estimates.whole_layer_mem_mb(manifest, attempt=3) == int(3 * (309_088 * 384 * 4 / 1e6 + 384 + 1024))
    # before the manifest exists: the paper's largest layer, 330k WordPieces x 1024 dims
    assert estimates.whole_layer_mem_mb(tmp_path / "missing.json") == int(330_000 * 1024 * 4 / 1e6 + 384 + 1024)
    job = (PROJECT / "src" / "contextuality" / "senses" / "job.py").read_text()
    assert job.count("reader.rows(dtype=SENSE_LAYER_DTYPE)") == 2 and job.count("reader.rows(") == 2


def test_measurement_memory_is_the_budget_whatever_the_layer(tmp_path):
    """A layer's job asks for metrics.memory_mb: a larger layer is measured in chunks, not in more memory."""
    small, huge = tmp_path / "small.json", tmp_path / "huge.json"
    small.write_text(json.dumps({"rows": 1_000, "dim": 384}))
    huge.write_text(json.dumps({"rows": 30_000_000, "dim": 4096}))
    measure = _settings(tmp_path, memory_mb=3000).metrics.measure
    assert estimates.measure_mem_mb(measure, small) == estimates.measure_mem_mb(measure, huge) == 3000
    assert estimates.measure_mem_mb(measure, huge, attempt=2) == 6000
    assert _settings(tmp_path).metrics.measure.memory_mb == 2048  # the schema's default


def test_extraction_runtime_counts_the_plans_sentences(tmp_path):
    """Any corpus: once the plan exists its sentence count (tokens.parquet's rows) sizes the shards, not STS's."""
    import pandas as pd

    settings = _settings(tmp_path, n_shards=2)
    tokens = tmp_path / "tokens.parquet"
    pd.DataFrame({"sentence_id": range(165_998)}).to_parquet(tokens)
    assert estimates.shard_sentences(settings.models["m"], settings.corpus) == 12_544  # STS's 25,088 / 2
    # cut between windows of 256 sentences, as the shard jobs cut them: 324 windows and 325 (the last one short)
    assert estimates.shard_sentences(settings.models["m"], settings.corpus, tokens) == 165_998 - 324 * 256 == 83_054
    assert estimates.shard_sentences(settings.models["m"], settings.corpus, tmp_path / "missing.parquet") == 12_544


def _plan(tmp_path, lengths):
    """A plan's tokens.parquet: one row per sentence, ``input_ids`` of the given lengths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "tokens.parquet"
    ids = pa.array([list(range(n)) for n in lengths], type=pa.list_(pa.int32()))
    pq.write_table(pa.table({"sentence_id": pa.array(range(len(lengths)), pa.int64()), "input_ids": ids}), path)
    return path


def test_extraction_memory_takes_the_passes_and_windows_from_the_plan(tmp_path):
    """A corpus of paragraphs: 64 sentences of 2,048 tokens in a pass of SmolLM2 (31 x 576) hold 18.7 GB of hidden
    states, where the estimate assumed STS's 128 tokens (a paragraph corpus ran out of memory). The plan's longest
    sentence in the shard sets a pass, its widest window the pooled vectors; STS-length plans keep the calibrated
    estimate."""
    model = _settings(tmp_path, batch_size=64, n_shards=2).models["m"]
    record = _record(tmp_path, 538_090_408, 31, 576)
    vector_bytes = 31 * 576 * 8
    sts = estimates.extraction_mem_mb(model, record)
    short = _plan(tmp_path, [20] * 600)
    assert estimates.extraction_mem_mb(model, record, tokens_path=short, shard=0) == sts  # within the STS bounds
    paragraphs = _plan(tmp_path, [2048] * 300 + [30] * 256)  # windows of 256: shard 0 holds window 0, shard 1 1-2
    batch = 64 * 2048 * vector_bytes / 1e6
    assert batch == pytest.approx(18_723, abs=1)
    window = 256 * 2048 * vector_bytes / 1e6
    expected = int(1000 + 2 * 538.090408 + batch + window)
    assert estimates.extraction_mem_mb(model, record, tokens_path=paragraphs, shard=0) == expected
    assert estimates.extraction_mem_mb(model, record, tokens_path=paragraphs, shard=0) > 18_723 + sts
    # a token cap bounds a pass, not the windows (4 x batch_size sentences): lower batch_size for those
    capped = load_settings(
        {
            "models": {"m": {"source": "hub", "id": "org/m", "revision": "0" * 40}},
            "extraction": {"max_batch_tokens": 4096, "n_shards": 2},
        }
    ).models["m"]
    assert estimates.extraction_mem_mb(capped, record, tokens_path=paragraphs, shard=0) == int(
        1000 + 2 * 538.090408 + 4096 * vector_bytes / 1e6 + window
    )
    assert estimates.batch_tokens(capped, longest=8192) == 8192  # a longer sentence runs alone
    # shard 1: window 1 (sentences 256-511: 44 paragraphs, 212 short ones) and window 2 (short ones)
    last = estimates.extraction_mem_mb(model, record, tokens_path=paragraphs, shard=1)
    assert last == int(1000 + 2 * 538.090408 + batch + (44 * 2048 + 212 * 30) * vector_bytes / 1e6)


def test_the_largest_shard_is_the_largest_the_shard_jobs_cut(tmp_path):
    """The estimate divided the sentences evenly while the jobs cut shards between windows (shard_bounds): one
    computation now, the jobs'."""
    from contextuality.core.settings import WINDOW_BATCHES, shard_bounds

    for n_sentences, n_shards, batch_size in ((25_088, 2, 64), (1000, 3, 8), (120, 4, 64), (5, 1, 1)):
        settings = _settings(tmp_path, batch_size=batch_size, n_shards=n_shards, max_sentences=n_sentences)
        bounds = [shard_bounds(n_sentences, n_shards, shard, WINDOW_BATCHES * batch_size) for shard in range(n_shards)]
        assert estimates.shard_sentences(settings.models["m"], settings.corpus) == max(b - a for a, b in bounds)


# --------------------------------------------------------------------------------------------------
# The whole run, before any job (contextuality.workflow.run_need)

import yaml  # noqa: E402

from conftest import PROJECT  # noqa: E402
from contextuality.workflow.schema import ConfigError  # noqa: E402


def _default_settings():
    return load_settings(yaml.safe_load((PROJECT / "config" / "config.yaml").read_text()))


def test_the_default_runs_disk_is_its_rows_times_its_layers_before_any_model_is_built(tmp_path, monkeypatch):
    """STS's 25,088 sentences and 800 sense types' 4,960 usages, in float16: MiniLM 13.2 pieces a sentence x 7 x
    384, SmolLM2 11.4 words x 31 x 576 (their shapes known before they are built), about 14 GB."""
    monkeypatch.chdir(tmp_path)  # no results/ here: nothing built, nothing written
    need = run_need.run_need(_default_settings())
    rows = {key: int(25088 * per) + int(int(6.2 * 800) * per) for key, per in (("minilm", 13.2), ("smollm2", 11.4))}
    expected = {"minilm": rows["minilm"] * 7 * 384 * 2 * 1.002, "smollm2": rows["smollm2"] * 31 * 576 * 2 * 1.002}
    assert {m.key: m.disk_bytes for m in need.models} == {
        key: pytest.approx(value, rel=1e-6) for key, value in expected.items()
    }
    assert not need.assumed and 13e9 < need.disk_bytes < 15e9
    line = run_need.estimate_line(_default_settings(), need, 2, 40e9)
    assert line.startswith("contextuality: this run stores about 14.") and "40.00 GB free" in line
    assert "on 2 CPU cores" in line and "minutes" in line and f"about {need.jobs} jobs" in line
    assert "rough: calibrated on 2 idle CPU cores, up to 5-10x slower on a loaded machine" in line
    # twice the cores, half the time
    halves = [run_need.estimate_line(_default_settings(), need, cores, None) for cores in (2, 4)]
    minutes = [int(line.split("takes about ")[1].split(" ")[0]) for line in halves]
    assert minutes[1] == pytest.approx(minutes[0] / 2, abs=1)


def test_the_atlas_models_shipped_in_parts_have_their_shapes_before_they_are_built(tmp_path, monkeypatch):
    """config/README.md's mpnet and gemma entries: keyed by their package, as a pypi entry names them."""
    from test_assemble import GEMMA, MPNET

    monkeypatch.chdir(tmp_path)
    settings = load_settings({"models": {"mpnet": MPNET, "gemma": GEMMA}})
    shapes = {key: run_need.model_shape(model) for key, model in settings.models.items()}
    assert shapes == {"gemma": ((19, 640), False), "mpnet": ((13, 768), False)}


def test_an_unknown_models_shape_is_assumed_and_said_and_does_not_stop_a_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = _settings(tmp_path)
    need = run_need.run_need(settings)
    assert need.assumed == ["m"] and need.known_bytes == 0 and need.disk_bytes > 0
    assert "m assumed 13 layers x 1024 dims until built" in run_need.estimate_line(settings, need, 2, 1)
    run_need.check_fits(settings, need, free=1)  # only known sizes stop a run


def test_a_run_whose_vectors_cannot_fit_stops_naming_its_size_and_the_ways_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = _default_settings()
    need = run_need.run_need(settings)
    run_need.check_fits(settings, need, free=need.disk_bytes + 1)
    with pytest.raises(ConfigError) as err:
        run_need.check_fits(settings, need, free=10**9)
    message = str(err.value)
    assert "about 14." in message and "1.00 GB are free" in message and "smollm2 12." in message
    assert "storage_dtype: float16" not in message and "vectors are float16 already" in message
    # float32 storage: float16 is suggested
    config = yaml.safe_load((PROJECT / "config" / "config.yaml").read_text())
    config["extraction"]["storage_dtype"] = "float32"
    settings32 = load_settings(config)
    with pytest.raises(ConfigError, match="storage_dtype: float16"):
        run_need.check_fits(settings32, run_need.run_need(settings32), free=10**9)
    # a rerun writes only what is not there yet
    shard = tmp_path / "results/embeddings/sts/smollm2/shards/shard_0.h5"
    shard.parent.mkdir(parents=True)
    with open(shard, "wb") as handle:
        handle.truncate(need.disk_bytes - 10**9 - 1000)
    again = run_need.run_need(settings)
    assert again.written_bytes == need.disk_bytes - 10**9 - 1000
    with pytest.raises(ConfigError, match="written already"):
        run_need.check_fits(settings, again, free=10**9)
    run_need.check_fits(settings, again, free=10**9 + 1000)


def _units(tmp_path, name: str, rows: int):
    """A plan's units.parquet of ``rows`` rows (the estimates read its footer's row count only)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / name
    pq.write_table(pa.table({"row": pa.array(range(rows), pa.int64())}), path)
    return path


MIB = 2**20
# SmolLM2-135M on STS: 31 layers x 576 dims, 538 MB of weights, 284,807 word rows (328 MB a float16 layer)
SMOLLM2 = {"weights_bytes": 538_090_408, "n_layers": 31, "dim": 576}
SMOLLM2_ROWS = 284_807


def _cpu_beside_layers(d: int, n_layers: int, models: int = 1) -> int:
    """What a CPU device job of STS-length plans holds and keeps beside its layers (docs/scaling.md): the
    interpreter and the model(s) twice, one pass of 64 x 128 tokens and one window of 256 x 64 rows of every layer,
    measure_model's d x d matrices, word batches and blocks of 2,048 rows (the sense job's own work is counted
    apart), and the host part."""
    held = 1000 * MIB + 2 * models * SMOLLM2["weights_bytes"]
    forward = 64 * 128 * n_layers * d * 4 * 2
    window = n_layers * 256 * 64 * d * 2
    work = 8 * d * d * 8 + 8 * 2**20 * 8 + 2048 * d * 8 * 3 if models == 1 else 0
    return held + forward + window + work + 512 * MIB


def test_a_cpu_device_job_declares_its_parts_layers_at_once_capped_by_the_machine(tmp_path):
    """On torch's CPU backend measure_model declares what it holds and keeps beside its layers plus every layer of its
    part (SmolLM2: 31 x 328 MB), so the job given it plans one group; capped at device_memory_fraction of the
    machine, where the job then plans more groups. On a GPU the declaration is as before."""
    from contextuality.measure.device import plan as device_plan

    settings = _settings(tmp_path, batch_size=64)
    model, metrics = settings.models["m"], settings.metrics
    record = _record(tmp_path, **SMOLLM2)
    tokens, units = _plan(tmp_path, [20] * 600), _units(tmp_path, "units.parquet", SMOLLM2_ROWS)
    assert estimates.batch_tokens(model, 128) == 64 * 128
    layer = SMOLLM2_ROWS * 576 * 2
    need = _cpu_beside_layers(576, 31) + 31 * layer
    declare = dict(units_path=units, storage_dtype="float16")
    got = estimates.device_measure_mem_mb(model, metrics, record, 1, tokens, **declare)
    # 9,700 MiB of layers; 2,026 held, 1,116 a pass, 558 a window, 111 the measurement's work, 512 the host part
    assert got == -(-need // MIB) == 14_024
    assert estimates.device_measure_mem_mb(model, metrics, record, 2, tokens, **declare) == -(-2 * need // MIB)
    two_parts = dataclasses.replace(metrics, device=dataclasses.replace(metrics.device, device_parts=2))
    assert estimates.device_measure_mem_mb(model, two_parts, record, 1, tokens, **declare) == -(
        -(_cpu_beside_layers(576, 31) + 16 * layer) // MIB
    )  # part 0 of 2: 15 layers, part 1: 16
    # capped at 0.9 (metrics.device_memory_fraction) of an 8 GiB machine, retries too
    small = 8 * 2**30
    for attempt in (1, 2):
        capped = estimates.device_measure_mem_mb(
            model, metrics, record, attempt, tokens, **declare, machine_bytes=small
        )
        assert capped == -(-int(0.9 * small) // MIB)
    assert (
        estimates.device_measure_mem_mb(model, metrics, record, 1, tokens, **declare, machine_bytes=64 * 2**30) == got
    )
    # a GPU job's layers are in the GPU's memory: its host declaration is a shard job's plus metrics.memory_mb
    gpu = estimates.device_measure_mem_mb(model, metrics, record, 1, tokens, **declare, gpus=1, machine_bytes=small)
    whole = dataclasses.replace(model, n_shards=1)
    assert gpu == int(estimates.extraction_mem_mb(whole, record, 1, tokens, 0) + 2048)
    # the job plans its groups in what it was given, with the same arithmetic (the plan's actual passes are no larger)
    reserve = device_plan.reserve_bytes(d=576, n_layers=31, batch_tokens=64 * 128, widest_window=256 * 64, itemsize=2,
                                        on_cuda=False) + 512 * MIB  # fmt: skip
    held = device_plan.held_bytes(SMOLLM2["weights_bytes"])

    def groups(job_memory_mb):
        free = device_plan.free_device_bytes("cpu", job_memory_mb, held)
        return device_plan.plan_groups(list(range(31)), layer, free, device_plan.usable_fraction("cpu", 0.9), reserve,
                                       job_memory_mb).groups  # fmt: skip

    assert groups(got) == [list(range(31))]
    assert len(groups(capped)) == 4  # 7,373 MiB: 3,049 of it for layers beside 4,324 held and kept, 9 a group
    with pytest.raises(device_plan.DeviceMemoryError, match="the job was given 2048 MB of host memory"):
        groups(2048)


def test_a_cpu_device_sense_job_declares_both_corpora_every_layer_two_models_and_the_measures_work(tmp_path):
    """The sense job on the device path: both corpora's rows in every layer at once (the usages' plan beside the
    study corpus's), the model with its output head loaded beside the one it runs, and the measures' float32 rows
    of one layer of both with their word batches and tables (``senses.memory``)."""
    from contextuality.senses import memory

    settings = _settings(tmp_path, batch_size=64)
    model, metrics = settings.models["m"], settings.metrics
    record = _record(tmp_path, **SMOLLM2)
    tokens = [_plan(tmp_path, [20] * 600)] * 2
    units = [_units(tmp_path, "units.parquet", SMOLLM2_ROWS), _units(tmp_path, "usages_units.parquet", 150_000)]
    rows = SMOLLM2_ROWS + 150_000
    work = rows * 576 * 4 + (384 + 1024) * MIB
    assert memory.work_bytes(rows, 576) == work
    need = _cpu_beside_layers(576, 31, models=2) + work + 31 * rows * 576 * 2
    declare = dict(tokens_paths=tokens, units_paths=units, storage_dtype="float16")
    assert estimates.device_senses_mem_mb(model, metrics, record, 1, **declare) == -(-need // MIB)
    assert estimates.device_senses_mem_mb(model, metrics, record, 1, **declare, machine_bytes=16 * 2**30) == -(
        -int(0.9 * 16 * 2**30) // MIB
    )
    whole = dataclasses.replace(model, n_shards=1)
    gpu = estimates.device_senses_mem_mb(model, metrics, record, 1, **declare, gpus=1)
    assert gpu == int(estimates.extraction_mem_mb(whole, record, 1, tokens[0], 0) + (2 * 538_090_408 + work) / 1e6)
