"""Tests of the compact ELMo against TensorFlow's own outputs and against allennlp's numerics.

* Golden: allennlp's test fixture, a tiny trained bilm-tf model with the top-layer outputs TensorFlow produced
  when fed 10 batches of 3 sentences in order, carrying LSTM state between batches.
* Reference: `simple_elmo_pytorch`, a copy of allennlp 2.10's ELMo (test-only), on random weights written here
  in the official layout, with clips small enough to bite.
* Invariances: stateless results do not depend on batching, padding or earlier sentences.
"""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from contextuality.models.elmo import ElmoBiLM, ElmoEmbedder, batch_to_char_ids

GOLDEN = Path(__file__).parent / "data" / "elmo-golden"
ATOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """The models are tiny: extra threads only cost time, most of all on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SENTENCES = [
    ["The", "naïve", "café", "owner", "smiled", "."],
    ["a" + "é" * 30, "x"],  # 61 UTF-8 bytes: the 48-byte cut splits a two-byte character
    ["<S>", "Hello", "</S>", "world"],
    [],
    ["Ünïcödé", "😀", "ok"],
]


def write_random_elmo(
    directory: Path,
    seed: int = 0,
    *,
    projection_dim: int = 16,
    cell_dim: int = 32,
    filters: tuple = ((1, 8), (3, 16)),
    n_highway: int = 1,
    activation: str = "relu",
    cell_clip: float = 1.0,
    proj_clip: float = 0.5,
    explicit_identity_projections: bool = False,
) -> tuple[Path, Path]:
    """Write options.json and weights.hdf5 in the official bilm-tf layout with random normal weights.

    Standard deviation 0.5, divided by the square root of the fan-in for the highway and LSTM kernels, so that the
    clips bite often while float32 rounding differences are not amplified past the test tolerance.

    `CNN_proj` and `W_P_0` are written only where bilm-tf writes them (filter total != projection_dim,
    projection_dim < cell_dim), unless `explicit_identity_projections` writes identity ones in their place, which
    is what allennlp needs to read such a model.
    """
    rng = np.random.default_rng(seed)
    n_filters = sum(n for _, n in filters)
    dim, proj = 4, projection_dim

    def normal(*shape, scale=0.5):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    options = {
        "lstm": {
            "projection_dim": proj,
            "dim": cell_dim,
            "n_layers": 2,
            "cell_clip": cell_clip,
            "proj_clip": proj_clip,
            "use_skip_connections": True,
        },
        "char_cnn": {
            "activation": activation,
            "embedding": {"dim": dim},
            "filters": [list(f) for f in filters],
            "n_highway": n_highway,
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "options.json").write_text(json.dumps(options))
    with h5py.File(directory / "weights.hdf5", "w") as f:
        f["char_embed"] = normal(261, dim)
        for i, (width, n) in enumerate(filters):
            f[f"CNN/W_cnn_{i}"] = normal(1, width, dim, n)
            f[f"CNN/b_cnn_{i}"] = normal(n)
        for k in range(n_highway):
            for name in ("carry", "transform"):
                f[f"CNN_high_{k}/W_{name}"] = normal(n_filters, n_filters, scale=0.5 / np.sqrt(n_filters))
                f[f"CNN_high_{k}/b_{name}"] = normal(n_filters)
        if n_filters != proj:
            f["CNN_proj/W_proj"] = normal(n_filters, proj)
            f["CNN_proj/b_proj"] = normal(proj)
        elif explicit_identity_projections:
            f["CNN_proj/W_proj"] = np.eye(proj, dtype=np.float32)
            f["CNN_proj/b_proj"] = np.zeros(proj, dtype=np.float32)
        for direction in range(2):
            for layer in range(2):
                group = f.create_group(f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell")
                state_dim = proj if proj < cell_dim else cell_dim
                group["W_0"] = normal(proj + state_dim, 4 * cell_dim, scale=1 / np.sqrt(proj + state_dim))
                group["B"] = normal(4 * cell_dim)
                if proj < cell_dim:
                    group["W_P_0"] = normal(cell_dim, proj)
                elif explicit_identity_projections:
                    group["W_P_0"] = np.eye(cell_dim, dtype=np.float32)
    return directory / "options.json", directory / "weights.hdf5"


@pytest.fixture(scope="module")
def simple_elmo():
    """The test-only reference carrying allennlp's ELMo numerics."""
    return pytest.importorskip("simple_elmo_pytorch")


def reference_runner(simple_elmo, options, weights):
    """allennlp's biLM on a weights file, carried state reset: sentences -> (activations (B, T + 2, 2P), mask)."""
    bilm = simple_elmo.ElmoBiLmSentence(str(options), str(weights))
    bilm._elmo_lstm.reset_states()

    def run(sentences):
        out = bilm(simple_elmo.batch_to_ids(sentences))
        return [a.detach().numpy() for a in out["activations"]], out["mask"].numpy()

    return run


def our_activations(bilm, sentences):
    with torch.inference_mode():
        layers, mask = bilm(batch_to_char_ids(sentences))
    return [a.numpy() for a in layers], mask.numpy()


def assert_layers_close(ours, reference):
    assert len(ours) == len(reference)
    for layer, (a, b) in enumerate(zip(ours, reference)):
        assert a.shape == b.shape, layer
        np.testing.assert_allclose(a, b, rtol=0, atol=ATOL, err_msg=f"layer {layer}")


# --- golden TensorFlow outputs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def golden():
    streams = json.loads((GOLDEN / "sentences.json").read_text())
    expected = []
    for i in range(len(streams)):
        with h5py.File(GOLDEN / f"lm_embeddings_{i}.hdf5", "r") as f:
            # Each dataset is (2, n_tokens, P): the top layer's forward and backward outputs, no <S>/</S>.
            expected.append([np.concatenate(list(f[str(k)][...]), axis=-1) for k in range(len(streams[i]))])
    return streams, expected


def golden_embedder(stateful):
    return ElmoEmbedder(GOLDEN / "options.json", GOLDEN / "lm_weights.hdf5", stateful=stateful)


def test_stateless_matches_tensorflow_on_first_batch(golden):
    streams, expected = golden
    out = golden_embedder(stateful=False).embed_batch([s[0].split() for s in streams])
    for i, vectors in enumerate(out):
        np.testing.assert_allclose(vectors[-1], expected[i][0], rtol=0, atol=ATOL)


def test_stateful_matches_tensorflow_on_all_batches(golden):
    streams, expected = golden
    embedder = golden_embedder(stateful=True)
    for k in range(len(streams[0])):
        out = embedder.embed_batch([s[k].split() for s in streams])
        for i, vectors in enumerate(out):
            np.testing.assert_allclose(vectors[-1], expected[i][k], rtol=0, atol=ATOL, err_msg=f"batch {k}")


def test_output_shapes_and_empty_sentences():
    out = golden_embedder(stateful=False).embed_batch([["a", "b", "c"], [], ["d"]])
    assert [v.shape for v in out] == [(3, 3, 32), (3, 0, 32), (3, 1, 32)]
    assert all(v.dtype == np.float32 for v in out)
    # Layer 0 is the context-free token vector, duplicated.
    np.testing.assert_array_equal(out[0][0, :, :16], out[0][0, :, 16:])
    assert [v.shape for v in golden_embedder(stateful=True).embed_batch([[]])] == [(3, 0, 32)]


# --- allennlp's numerics on random weights ------------------------------------------------------------------


def test_character_ids_match_allennlp(simple_elmo):
    np.testing.assert_array_equal(batch_to_char_ids(SENTENCES).numpy(), simple_elmo.batch_to_ids(SENTENCES).numpy())


@pytest.mark.parametrize("activation,n_highway", [("relu", 1), ("tanh", 2)])
def test_all_layers_match_allennlp(simple_elmo, tmp_path, activation, n_highway):
    options, weights = write_random_elmo(tmp_path, seed=1, activation=activation, n_highway=n_highway)
    reference = reference_runner(simple_elmo, options, weights)
    ours, mask = our_activations(ElmoBiLM.from_files(options, weights), SENTENCES)
    expected, expected_mask = reference(SENTENCES)
    np.testing.assert_array_equal(mask, expected_mask)
    assert_layers_close(ours, expected)
    assert all((layer[~mask] == 0).all() for layer in ours)


def test_stateful_matches_allennlp_across_batch_sizes(simple_elmo, tmp_path):
    """Carried states per batch row, including a smaller batch (extra rows kept) followed by a larger one."""
    options, weights = write_random_elmo(tmp_path, seed=2)
    reference = reference_runner(simple_elmo, options, weights)
    ours = ElmoBiLM.from_files(options, weights, stateful=True)
    for batch in (SENTENCES[:3], SENTENCES[3:], SENTENCES[:1], SENTENCES[1:], SENTENCES[2:4]):
        assert_layers_close(our_activations(ours, batch)[0], reference(batch)[0])


def test_layout_without_projections_matches_allennlp(simple_elmo, tmp_path):
    """bilm-tf omits CNN_proj when filters total projection_dim and W_P_0 when dim == projection_dim."""
    kwargs = dict(projection_dim=16, cell_dim=16, filters=((1, 8), (3, 8)), proj_clip=100.0)
    options, weights = write_random_elmo(tmp_path / "bare", seed=3, **kwargs)
    with h5py.File(weights, "r") as f:
        assert "CNN_proj" not in f and "W_P_0" not in f["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell"]
    # allennlp always applies both, so give it identities (and a proj_clip that cannot bite).
    ref_options, ref_weights = write_random_elmo(tmp_path / "ref", seed=3, explicit_identity_projections=True, **kwargs)
    reference = reference_runner(simple_elmo, ref_options, ref_weights)
    assert_layers_close(
        our_activations(ElmoBiLM.from_files(options, weights), SENTENCES)[0],
        reference(SENTENCES)[0],
    )


def test_random_weights_exercise_the_clips(tmp_path):
    """The random test model is only a test of clipping if switching a clip off changes the outputs."""
    options, weights = write_random_elmo(tmp_path, seed=1)
    clipped = our_activations(ElmoBiLM.from_files(options, weights), SENTENCES)[0]
    for key in ("cell_clip", "proj_clip"):
        settings = json.loads(options.read_text())
        settings["lstm"][key] = 0
        bilm = ElmoBiLM(settings)
        bilm.load_weights(weights)
        unclipped = our_activations(bilm, SENTENCES)[0]
        assert np.abs(clipped[1] - unclipped[1]).max() > 1e-3, key


# --- stateless invariances ----------------------------------------------------------------------------------


def test_stateless_vectors_do_not_depend_on_batching_or_padding():
    embedder = golden_embedder(stateful=False)
    sentence = ["Short", "one", "."]
    alone = embedder.embed_batch([sentence])[0]
    longer = [["A", "much", "longer", "sentence", "that", "forces", "padding", "of", "the", "short", "one", "."]]
    in_batch = embedder.embed_batch(longer + [sentence] + longer)[1]
    np.testing.assert_allclose(in_batch, alone, rtol=0, atol=ATOL)


def test_stateless_vectors_do_not_depend_on_earlier_sentences():
    embedder = golden_embedder(stateful=False)
    sentence = ["The", "cat", "sat", "."]
    fresh = embedder.embed_batch([sentence])[0]
    embedder.embed_batch([["Something", "else", "entirely", "."], ["More", "text"]])
    np.testing.assert_allclose(embedder.embed_batch([sentence])[0], fresh, rtol=0, atol=ATOL)
    stateful = golden_embedder(stateful=True)
    first = stateful.embed_batch([sentence])[0]
    assert np.abs(stateful.embed_batch([sentence])[0] - first).max() > 1e-3
    stateful.reset_states()
    np.testing.assert_allclose(stateful.embed_batch([sentence])[0], first, rtol=0, atol=ATOL)
