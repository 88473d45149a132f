"""Kinds of layer (token mixers) as types: one class per kind, as vLLM's KV cache specs (FullAttentionSpec,
SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec), each saying what a layer of its kind holds.

A ModelSpec names each layer's kind (``layer_types``: ``full``, ``sliding``, ``chunked``, ``mamba``);
:data:`KINDS` maps the name to its kind object, and every loop over kinds iterates it. A kind says:

- the span a layer attends over for a model (:meth:`LayerKind.window`: the sliding window, the chunk, or 0)
  and the first key a query attends to (:meth:`LayerKind.first_attended`), hence the tokens a layer holds
  for a context (:meth:`LayerKind.tokens_held`);
- its bytes: per token (attention) or one state per sequence (recurrent) (:meth:`LayerKind.sequence_bytes`);
- what the paged layouts do with it (kvsim/allocators/kv_groups.py, kv_managers.py): the blocks a request
  holds at its peak (:meth:`LayerKind.max_blocks`), when a window frees a block
  (:meth:`LayerKind.computed_skipping`), what a prefix-cache hit keeps (:meth:`LayerKind.needed_hit_blocks`),
  where a decode's holding peaks (:meth:`LayerKind.peak_points`);
- its step-time part (kvsim/latency/perop.py): attention layers read the KV they attend to (windowed prefill
  walks :meth:`LayerKind.first_attended` tile by tile, in closed form for the sliding and chunked rules);
  a recurrent layer (``attention`` False) reads and writes its state once per scheduled sequence.

A new kind is one class here, registered with :func:`register` (and, if its layers are read from config.json
files, its Hugging Face name in hf_config.py's ``HF_LAYER_TYPES``).
"""

from __future__ import annotations


class LayerKind:
    """A layer kind; these defaults: full attention (every token kept, every block of a prefix hit needed)."""

    name = "full"
    attention = True  # holds KV per token (False: one recurrent state per sequence)
    windowed = False  # attends over a bounded span: blocks before it are freed
    window_field = ""  # the ModelSpec field that gives its span ("" : none)
    required_fields: tuple[str, ...] = ()  # ModelSpec fields a model with such layers must set (positive integers)

    def __repr__(self) -> str:
        return f"<layer kind {self.name}>"

    # --- what a layer attends to and holds ------------------------------------------------------------
    def window(self, model) -> int:
        """Tokens a layer of this kind can attend back over in ``model``: its span, or 0 (no bound)."""
        return getattr(model, self.window_field) if self.window_field else 0

    def label(self, model) -> str:
        """The kind as people call it, for tables."""
        return self.name

    def first_attended(self, window: int, position):
        """The first key position a query at ``position`` (0-based) attends to. Works on numpy arrays too."""
        return position * 0

    def tokens_held(self, model, context: int) -> int:
        """Tokens a layer of this kind must hold to compute the last token of a ``context``-token sequence."""
        if not self.attention or context <= 0:
            return 0
        return context - self.first_attended(self.window(model), context - 1)

    def token_bytes(self, model, tp: int = 1) -> int:
        """Bytes one token takes in one layer of this kind on one of ``tp`` GPUs (0: it keeps no tokens)."""
        return model.kv_bytes_per_token_layer(tp) if self.attention else 0

    def state_bytes(self, model, tp: int = 1) -> int:
        """Bytes of one sequence's state in one layer of this kind on one of ``tp`` GPUs (0: none)."""
        return 0

    def sequence_bytes(self, model, context: int, tp: int = 1) -> int:
        """Exact bytes one sequence of ``context`` tokens needs in one layer of this kind on one GPU."""
        return self.tokens_held(model, context) * self.token_bytes(model, tp) + self.state_bytes(model, tp)

    # --- pages (kv_groups.py, kv_managers.py) ------------------------------------------------------------
    def computed_skipping(self, window: int, tokens: int) -> int:
        """The fewest computed tokens at which the first ``tokens`` tokens are no longer attended to."""
        raise NotImplementedError(f"{self.name} layers free nothing")

    def needed_hit_blocks(self, window: int, hit_blocks: int, block_size: int) -> int:
        """Of a prefix hit of ``hit_blocks`` blocks, how many (the last ones) a group of this kind needs cached."""
        return hit_blocks

    def max_blocks(self, window: int, block_size: int, max_model_len: int, chunk: int, state_pages: int = 1) -> int:
        """Blocks one group of this kind holds at a max-length request's peak, computed in prefill chunks of
        ``chunk`` tokens (0: whole), as vLLM's ``max_memory_usage_bytes``: every token."""
        return -(-max_model_len // block_size)

    def peak_points(self, window: int, prompt: int, total: int) -> set[int]:
        """Computed-token counts near which a decoding sequence's holding may peak (besides its end)."""
        return set()


class FullAttention(LayerKind):
    """Attention over the whole context (K and V per KV head, or one MLA latent per token)."""


class SlidingWindow(LayerKind):
    """Attention over the last ``sliding_window`` tokens, the token itself included."""

    name = "sliding"
    windowed = True
    window_field = "sliding_window"
    required_fields = ("sliding_window",)

    def first_attended(self, window: int, position):
        d = position - window + 1
        return d * (d > 0)

    def computed_skipping(self, window: int, tokens: int) -> int:
        return tokens + window - 1

    def needed_hit_blocks(self, window: int, hit_blocks: int, block_size: int) -> int:
        """The window's blocks: cdiv(W - 1, B), as vLLM."""
        return min(hit_blocks, -(-(window - 1) // block_size))

    def max_blocks(self, window: int, block_size: int, max_model_len: int, chunk: int, state_pages: int = 1) -> int:
        """The last W - 1 computed tokens plus the chunk, one more block because the window need not start at a
        block boundary."""
        T = chunk or max_model_len
        return -(-min(window - 1 + T, max_model_len) // block_size) + 1

    def peak_points(self, window: int, prompt: int, total: int) -> set[int]:
        return {window - 1}  # the window fills, then frees as fast as it grows


class ChunkedLocal(LayerKind):
    """Attention within the token's ``attention_chunk`` (Llama 4's local layers)."""

    name = "chunked"
    windowed = True
    window_field = "attention_chunk"
    required_fields = ("attention_chunk",)

    def first_attended(self, window: int, position):
        return position // window * window

    def computed_skipping(self, window: int, tokens: int) -> int:
        return -(-tokens // window) * window

    def needed_hit_blocks(self, window: int, hit_blocks: int, block_size: int) -> int:
        """The current chunk's blocks."""
        return hit_blocks - (hit_blocks * block_size) // window * window // block_size

    def max_blocks(self, window: int, block_size: int, max_model_len: int, chunk: int, state_pages: int = 1) -> int:
        """The chunk's tokens plus the prefill chunk."""
        T = chunk or max_model_len
        return -(-min(window + T, max_model_len) // block_size)

    def peak_points(self, window: int, prompt: int, total: int) -> set[int]:
        """A decode's holding drops at each chunk boundary."""
        w = window
        return {w - 1, -(-(prompt + 1) // w) * w - 1, (total - 1) // w * w - 1}


class Mamba(LayerKind):
    """A recurrent layer holding a fixed-size state per sequence (conv + SSM state; or Gated DeltaNet's): no
    tokens, one page per sequence; its state is the last token's, so a prefix hit keeps nothing of it (the
    layer-group allocators give a model with such layers no hits, as vLLM V1 without mamba prefix caching)."""

    name = "mamba"
    attention = False
    required_fields = ("mamba_d_inner", "mamba_d_state", "mamba_d_conv")

    def label(self, model) -> str:
        return "Gated DeltaNet" if model.gdn_key_width else "mamba"

    def state_bytes(self, model, tp: int = 1) -> int:
        return model.state_bytes_per_layer(tp)

    def needed_hit_blocks(self, window: int, hit_blocks: int, block_size: int) -> int:
        return 0

    def max_blocks(self, window: int, block_size: int, max_model_len: int, chunk: int, state_pages: int = 1) -> int:
        """``state_pages`` pages: one, or two with prefix caching, whose ``align`` mode keeps the last
        block-aligned state beside the running one."""
        return state_pages


#: the kinds by name, in the order tables and layouts list them
KINDS: dict[str, LayerKind] = {}


def register(kind: LayerKind) -> LayerKind:
    """Add a kind to :data:`KINDS` (a new kind's one line beside its class)."""
    KINDS[kind.name] = kind
    return kind


for _kind in (FullAttention(), SlidingWindow(), ChunkedLocal(), Mamba()):
    register(_kind)
del _kind
