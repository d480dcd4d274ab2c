"""A compact PyTorch ELMo biLM (Peters et al. 2018) that reads the official bilm-tf files.

Written from bilm-tf's TensorFlow semantics, without allennlp, so that the project needs no pinned old stack:
character ids, char CNN with highway layers, and per direction a stack of projected, clipped LSTMs with residual
connections. `ElmoEmbedder` gives what allennlp 0.9's `ElmoEmbedder` gave Ethayarajh (2019): per sentence the
token layer and every biLSTM layer, without the sentence boundary tokens. `stateful=True` reproduces the original
behaviour of carrying each batch row's LSTM state into the next batch.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

# Character ids of bilm-tf's UnicodeCharsVocabulary and allennlp's ELMoCharacterMapper, before the +1 offset
# that frees id 0 for padding. Ids 0-255 are UTF-8 bytes.
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"
MAX_CHARS = 50
N_CHAR_IDS = PAD_CHAR + 2  # ids 0..261 after the offset, 0 being padding

# TF's LSTMCell adds this to the forget gate at run time; it is not stored in the weights file.
FORGET_BIAS = 1.0


def word_to_char_ids(word: str, max_chars: int = MAX_CHARS) -> list[int]:
    """Character ids of one token: begin-of-word, its UTF-8 bytes cut to max_chars - 2, end-of-word, padding.

    `<S>` and `</S>` map to the sentence markers. Every id carries the +1 offset, so 0 never occurs in a word.
    """
    if word == BOS_TOKEN:
        body = [BOS_CHAR]
    elif word == EOS_TOKEN:
        body = [EOS_CHAR]
    else:
        body = list(word.encode("utf-8", "ignore")[: max_chars - 2])
    ids = [BOW_CHAR, *body, EOW_CHAR] + [PAD_CHAR] * (max_chars - len(body) - 2)
    return [i + 1 for i in ids]


def batch_to_char_ids(sentences: list[list[str]], max_chars: int = MAX_CHARS) -> torch.Tensor:
    """Character ids (B, T, max_chars) of tokenized sentences, T the longest sentence; padding tokens are all 0.

    The sentence tokens `<S>` and `</S>` are not included: `ElmoBiLM` adds them, as allennlp does.
    """
    ids = np.zeros((len(sentences), max((len(s) for s in sentences), default=0), max_chars), dtype=np.int64)
    for b, sentence in enumerate(sentences):
        for t, word in enumerate(sentence):
            ids[b, t] = word_to_char_ids(word, max_chars)
    return torch.from_numpy(ids)


def _copy(param: torch.Tensor, array: np.ndarray, name: str) -> None:
    """Copy a weights-file array into a parameter, refusing a shape that does not match the options."""
    if tuple(array.shape) != tuple(param.shape):
        raise ValueError(f"{name}: weights file has shape {array.shape}, options imply {tuple(param.shape)}")
    param.data.copy_(torch.from_numpy(np.asarray(array, dtype=np.float32)))


def _frozen(*shape: int) -> nn.Parameter:
    """A zero parameter to be filled from the weights file; inference only, so no gradient."""
    return nn.Parameter(torch.zeros(*shape), requires_grad=False)


class CharCNN(nn.Module):
    """Context-free token vectors from character ids: char table, max-pooled convolutions, highway, projection."""

    def __init__(self, options: dict):
        super().__init__()
        cnn = options["char_cnn"]
        # bilm-tf trains with n_characters=261 and runs with 262 (id 0 = padding); the file holds the 261
        # trained rows either way.
        if cnn["n_characters"] not in (N_CHAR_IDS - 1, N_CHAR_IDS):
            raise ValueError(f"char_cnn.n_characters must be 261 or 262, not {cnn['n_characters']}")
        dim = cnn["embedding"]["dim"]
        self.max_chars = cnn["max_characters_per_token"]
        self.activation = {"relu": torch.relu, "tanh": torch.tanh}[cnn["activation"]]
        self.char_embed = _frozen(N_CHAR_IDS, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, n, width) for width, n in cnn["filters"])
        n_filters = sum(n for _, n in cnn["filters"])
        self.carry = nn.ModuleList(nn.Linear(n_filters, n_filters) for _ in range(cnn["n_highway"]))
        self.transform = nn.ModuleList(nn.Linear(n_filters, n_filters) for _ in range(cnn["n_highway"]))
        # bilm-tf projects only when the filter total differs from the LSTM input width.
        projection_dim = options["lstm"]["projection_dim"]
        self.projection = nn.Linear(n_filters, projection_dim) if n_filters != projection_dim else None
        self.requires_grad_(False)

    def load(self, f: h5py.File) -> None:
        """Load from an open bilm-tf weights file (TF kernels are used as x @ W, hence the transposes)."""
        # A zero padding row goes in front of the stored table, as in allennlp and bilm-tf.
        stored = f["char_embed"][...]
        _copy(self.char_embed.data[1:], stored[: N_CHAR_IDS - 1], "char_embed")
        for i, conv in enumerate(self.convs):
            # TF conv2d kernel (1, width, dim, n) -> Conv1d weight (n, dim, width); neither flips the kernel.
            _copy(conv.weight, f[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0), f"CNN/W_cnn_{i}")
            _copy(conv.bias, f[f"CNN/b_cnn_{i}"][...], f"CNN/b_cnn_{i}")
        for k, (carry, transform) in enumerate(zip(self.carry, self.transform)):
            for name, layer in (("carry", carry), ("transform", transform)):
                _copy(layer.weight, f[f"CNN_high_{k}/W_{name}"][...].T, f"CNN_high_{k}/W_{name}")
                _copy(layer.bias, f[f"CNN_high_{k}/b_{name}"][...], f"CNN_high_{k}/b_{name}")
        if self.projection is not None:
            _copy(self.projection.weight, f["CNN_proj/W_proj"][...].T, "CNN_proj/W_proj")
            _copy(self.projection.bias, f["CNN_proj/b_proj"][...], "CNN_proj/b_proj")

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(..., max_chars) character ids -> (..., projection_dim) token vectors."""
        chars = self.char_embed[char_ids.reshape(-1, char_ids.shape[-1])].transpose(1, 2)
        # Max over positions, then the activation (the same as the other way round for relu and tanh).
        x = torch.cat([self.activation(conv(chars).max(dim=-1).values) for conv in self.convs], dim=-1)
        for carry, transform in zip(self.carry, self.transform):
            # Highway layers are always relu. TF's "carry" gate weights the transformed branch.
            gate = torch.sigmoid(carry(x))
            x = gate * torch.relu(transform(x)) + (1 - gate) * x
        if self.projection is not None:
            x = self.projection(x)
        return x.reshape(*char_ids.shape[:-1], -1)


class ProjectedLSTM(nn.Module):
    """One direction of one layer: TF's LSTMCell with cell clip, output projection and projection clip.

    Gates come in TF order (i, j, f, o), j being the candidate; there are no peepholes.
    """

    def __init__(self, input_dim: int, cell_dim: int, projection_dim: int, cell_clip: float, proj_clip: float):
        super().__init__()
        # bilm-tf projects (and clips the projection) only when projection_dim < cell_dim.
        self.state_dim = projection_dim if projection_dim < cell_dim else cell_dim
        self.kernel = _frozen(input_dim + self.state_dim, 4 * cell_dim)
        self.bias = _frozen(4 * cell_dim)
        self.projection = _frozen(cell_dim, projection_dim) if projection_dim < cell_dim else None
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip

    def load(self, group: h5py.Group, name: str) -> None:
        """Load `W_0`, `B` and, if projected, `W_P_0` from a weights-file group."""
        _copy(self.kernel, group["W_0"][...], f"{name}/W_0")
        _copy(self.bias, group["B"][...], f"{name}/B")
        if self.projection is not None:
            _copy(self.projection, group["W_P_0"][...], f"{name}/W_P_0")

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Run left to right over x (B, T, input_dim) from state (h, c).

        Steps where mask (B, T) is False leave the state unchanged and output 0, so padding at the end of a row
        does not touch its real steps, and the returned state is the one after each row's last real step.
        """
        h, c = state
        n_in = x.shape[-1]
        gates_x = x @ self.kernel[:n_in] + self.bias
        kernel_h = self.kernel[n_in:]
        outputs = []
        for t in range(x.shape[1]):
            i, j, f, o = (gates_x[:, t] + h @ kernel_h).chunk(4, dim=-1)
            c_t = torch.sigmoid(f + FORGET_BIAS) * c + torch.sigmoid(i) * torch.tanh(j)
            if self.cell_clip:
                c_t = c_t.clamp(-self.cell_clip, self.cell_clip)
            h_t = torch.sigmoid(o) * torch.tanh(c_t)
            if self.projection is not None:
                h_t = h_t @ self.projection
                if self.proj_clip:
                    h_t = h_t.clamp(-self.proj_clip, self.proj_clip)
            step = mask[:, t, None]
            h = torch.where(step, h_t, h)
            c = torch.where(step, c_t, c)
            outputs.append(h_t * step)
        return torch.stack(outputs, dim=1), (h, c)


def _add_sentence_boundaries(char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Put `<S>` before and `</S>` after each row's tokens: (B, T, W) -> (B, T + 2, W), and the new row lengths.

    A token is real when any of its ids is nonzero; an empty sentence becomes `<S> </S>`.
    """
    batch_size, n_tokens, max_chars = char_ids.shape
    lengths = (char_ids > 0).any(dim=-1).sum(dim=-1)
    out = char_ids.new_zeros(batch_size, n_tokens + 2, max_chars)
    out[:, 1:-1] = char_ids
    bos, eos = (torch.tensor(word_to_char_ids(token, max_chars), device=out.device) for token in (BOS_TOKEN, EOS_TOKEN))
    out[:, 0] = bos
    out[torch.arange(batch_size, device=out.device), lengths + 1] = eos
    return out, lengths + 2


def _reverse_within_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row of x (B, T, ...) over its first lengths[b] steps, leaving the padding where it is."""
    t = torch.arange(x.shape[1], device=x.device)
    index = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return x.gather(1, index.view(*index.shape, *[1] * (x.dim() - 2)).expand_as(x))


class ElmoBiLM(nn.Module):
    """The ELMo biLM: char CNN, then forward and backward LSTM stacks that never mix until the output.

    With `stateful=True` the final (h, c) of every batch row is the initial state of the same row in the next
    batch, as in bilm-tf and allennlp's `_EncoderBase`: rows beyond the stored ones start from zero, and stored rows
    beyond a smaller batch are kept for later.
    """

    def __init__(self, options: dict, stateful: bool = False):
        super().__init__()
        lstm = options["lstm"]
        self.projection_dim = lstm["projection_dim"]
        self.cell_dim = lstm["dim"]
        self.n_layers = lstm["n_layers"]
        if self.projection_dim > self.cell_dim:
            raise ValueError("lstm.projection_dim larger than lstm.dim is not an ELMo layout")
        self.skip_connections = lstm.get("use_skip_connections", False)
        self.char_cnn = CharCNN(options)
        # lstms[direction][layer]; every layer reads and writes projection_dim features.
        dims = (self.projection_dim, self.cell_dim, self.projection_dim, lstm["cell_clip"], lstm["proj_clip"])
        self.lstms = nn.ModuleList(nn.ModuleList(ProjectedLSTM(*dims) for _ in range(self.n_layers)) for _ in range(2))
        self.stateful = stateful
        self._states: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_files(cls, options_path: str | Path, weights_path: str | Path, stateful: bool = False) -> ElmoBiLM:
        """Build from an options JSON and load an official `..._weights.hdf5`."""
        model = cls(json.loads(Path(options_path).read_text()), stateful=stateful)
        model.load_weights(weights_path)
        return model

    def load_weights(self, weights_path: str | Path) -> None:
        """Load an official bilm-tf weights file (`RNN_0` = forward LM, `RNN_1` = backward LM)."""
        with h5py.File(weights_path, "r") as f:
            self.char_cnn.load(f)
            for direction, stack in enumerate(self.lstms):
                for layer, cell in enumerate(stack):
                    name = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
                    cell.load(f[name], name)

    def reset_states(self) -> None:
        """Forget the carried LSTM states: the next batch starts from zero."""
        self._states = None

    def _initial_states(self, batch_size: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, c), each (n_layers, 2 directions, batch_size, dim): the carried rows, zeros for the rest."""
        zeros = (
            like.new_zeros(self.n_layers, 2, batch_size, self.lstms[0][0].state_dim),
            like.new_zeros(self.n_layers, 2, batch_size, self.cell_dim),
        )
        if not self.stateful or self._states is None:
            return zeros
        return tuple(
            torch.cat([kept[:, :, :batch_size], zero[:, :, kept.shape[2] :]], dim=2)
            for kept, zero in zip(self._states, zeros)
        )

    def _keep_states(self, final: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Store the batch's final states over the first rows, keeping stored rows beyond the batch."""
        if self.stateful:
            kept = self._states or final
            self._states = tuple(torch.cat([f, k[:, :, f.shape[2] :]], dim=2) for f, k in zip(final, kept))

    def forward(self, char_ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Character ids (B, T, max_chars) without sentence tokens -> (activations, mask).

        activations: n_layers + 1 tensors (B, T + 2, 2 * projection_dim), `<S>` at 0 and `</S>` after each row's
        last token, padded positions 0; layer 0 is the token vector twice, layer l is [forward_l ; backward_l].
        mask: (B, T + 2), True on `<S>`, the tokens and `</S>`.
        """
        batch_size = char_ids.shape[0]
        char_ids, lengths = _add_sentence_boundaries(char_ids)
        mask = torch.arange(char_ids.shape[1], device=char_ids.device) < lengths[:, None]
        tokens = self.char_cnn(char_ids) * mask[..., None]
        h0, c0 = self._initial_states(batch_size, tokens)
        # The backward LM runs left to right over each row reversed within its own length.
        inputs = [tokens, _reverse_within_lengths(tokens, lengths)]
        layers = [torch.cat([tokens, tokens], dim=-1)]
        final_h, final_c = [], []
        for layer in range(self.n_layers):
            outputs = []
            for direction in range(2):
                cell = self.lstms[direction][layer]
                out, (h, c) = cell(inputs[direction], mask, (h0[layer, direction], c0[layer, direction]))
                if self.skip_connections and layer > 0:
                    out = out + inputs[direction]
                outputs.append(out)
                final_h.append(h)
                final_c.append(c)
            inputs = outputs
            layers.append(torch.cat([outputs[0], _reverse_within_lengths(outputs[1], lengths)], dim=-1))
        self._keep_states(tuple(torch.stack(s).view(self.n_layers, 2, batch_size, -1) for s in (final_h, final_c)))
        return layers, mask


class ElmoEmbedder:
    """Per-sentence ELMo layers from the official options and weights files, on CPU or CUDA.

    Like allennlp 0.9's `ElmoEmbedder` (which the paper used) with `stateful=True`; `stateful=False` makes every
    sentence start from zero state, so results do not depend on what was embedded before or on batching.
    """

    def __init__(self, options_path: str | Path, weights_path: str | Path, device: str = "cpu", stateful: bool = False):
        self.device = torch.device(device)
        self.bilm = ElmoBiLM.from_files(options_path, weights_path, stateful=stateful).to(self.device).eval()

    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful mode)."""
        self.bilm.reset_states()

    @torch.inference_mode()
    def embed_batch(self, sentences: list[list[str]]) -> list[np.ndarray]:
        """Per sentence a float32 array (n_layers + 1, n_tokens, 2 * projection_dim), sentence tokens removed.

        A batch of empty sentences is not run and leaves the state alone, as allennlp 0.9 did for `[[]]`.
        """
        n_layers, width = self.bilm.n_layers + 1, 2 * self.bilm.projection_dim
        if not any(sentences):
            return [np.zeros((n_layers, 0, width), dtype=np.float32) for _ in sentences]
        char_ids = batch_to_char_ids(sentences, self.bilm.char_cnn.max_chars).to(self.device)
        layers, _ = self.bilm(char_ids)
        stacked = torch.stack(layers, dim=1).cpu().numpy()
        return [np.ascontiguousarray(stacked[b, :, 1 : len(s) + 1]) for b, s in enumerate(sentences)]
