"""Speculative decoding as vLLM V1 runs it (``--speculative-config``, vLLM's flag, with kvsim's
``--acceptance-length``).

Every step a drafter proposes K tokens per decoding sequence (``num_speculative_tokens``) and the target model
verifies them in one forward pass: each sequence's K drafts plus one more position (K + 1 query tokens), and
keeps the accepted prefix plus the target's own next token. vLLM logs the mean tokens a sequence gains per
step as "Mean acceptance length" (the bonus token included, so between 1 and K + 1): it depends on the
drafter, the traffic and the sampling temperature, which kvsim cannot know, so the user gives it.

Drafters (``method``):

- ``eagle`` / ``eagle3``: one decoder layer of the target's shape fed with its hidden states (EAGLE-3: three
  of them, projected by a 3h x h ``fc``; its own LM head over ``draft_vocab_size`` tokens, 32,000 for the
  published Llama and Qwen heads); it shares the target's embedding (and, EAGLE-1, its LM head). Its weights
  in the model's dtype; its layer's KV in the same pool as the target's (vLLM allocates one more attention
  layer per token). It runs K times per step: once over the accepted tokens, then K - 1 times one token per
  sequence.
- ``mtp``: the checkpoint's own multi-token-prediction layers (DeepSeek-V3/R1: one, a full MLA + MoE layer
  plus a 2h x h projection, in the checkpoint's dtype), run as EAGLE's layer is.
- ``ngram``: proposals looked up in the prompt (no weights, no KV, no GPU work).

How kvsim simulates it. The engine keeps one token per decoding sequence per iteration, so an iteration is
the 1/tau share of a verify step (tau = acceptance length): it takes 1/tau of the step's time, and a prefill
chunk scheduled in it stands for tau times as many prompt tokens of the real step, so prompts and decodes
both progress at their real rates. The engine's token budget is max_num_batched_tokens / tau (at least
max_num_seqs): a decode counts one token there where the real step spends K + 1 on it, which lets a step
take slightly more prefill than vLLM would when tau < K + 1. Mean times are those of the real steps; the
burstiness of tokens arriving tau at a time (ITL spread) is not simulated. The K lookahead slots vLLM
reserves per running sequence (at most one more block each) are not counted.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass, replace

from kvsim.errors import ConfigError
from kvsim.validation import shown

METHODS = ("eagle", "eagle3", "mtp", "ngram")
MAX_CONFIG_CHARS = 4096  # --speculative-config: vLLM's object is a few keys; anything longer is not one
MAX_CONFIG_DEPTH = 8  # nesting of [ and { in --speculative-config: the object itself is flat
MAX_SPECULATIVE_TOKENS = 16
EAGLE3_DRAFT_VOCAB = 32000  # draft_vocab_size of the published EAGLE-3 heads (Llama-3.1, Qwen3)


@dataclass(frozen=True)
class SpeculativeConfig:
    """What speculative decoding a configuration runs."""

    method: str
    num_speculative_tokens: int  # K: drafts proposed per sequence and step
    acceptance_length: float  # tokens a decoding sequence gains per step, bonus included (1 <= tau <= K + 1)
    draft_vocab_size: int = 0  # eagle3: the draft LM head's vocabulary (0: EAGLE3_DRAFT_VOCAB)
    mtp_layers: int = 1  # mtp: the checkpoint's num_nextn_predict_layers

    @property
    def tau(self) -> float:
        return self.acceptance_length

    def draft_model(self, target):
        """The drafter as a model of its own (its layers, shapes and dtype; kvsim.latency prices its passes), or
        None (ngram)."""
        if self.method == "ngram":
            return None
        if self.method == "mtp":
            return replace(
                target,
                name=f"{target.name} MTP",
                layers=self.mtp_layers,
                layer_types=(),
                moe_layers=(True,) * self.mtp_layers if target.is_moe else (),
                draft_layers=0,
                draft_weight_bytes=0.0,
            )
        vocab = (self.draft_vocab_size or EAGLE3_DRAFT_VOCAB) if self.method == "eagle3" else target.vocab_size
        return replace(
            target,
            name=f"{target.name} {self.method} draft",
            layers=1,
            layer_types=(),
            moe_layers=(),
            num_experts=0,
            experts_per_token=0,
            moe_intermediate_size=0,
            shared_experts=0,
            expert_dtype=None,
            weight_dtype=None,
            weight_quant=None,
            quant_method=None,
            vocab_size=vocab,
            draft_layers=0,
            draft_weight_bytes=0.0,
        )

    def draft_weight_bytes(self, target) -> float:
        """Bytes of the drafter's own weights: its layers, EAGLE's fc (2h x h; EAGLE-3 3h x h) and EAGLE-3's LM
        head, in the model's dtype; MTP's layers and its 2h x h projection in the checkpoint's."""
        draft = self.draft_model(target)
        if draft is None:
            return 0.0
        h = target.hidden_size
        layer = draft.attention_params() + draft.ffn_params(draft.is_moe) + 2 * h
        if self.method == "mtp":
            return self.mtp_layers * (layer + 2 * h * h + 2 * h) * target.weight_dtype_bytes
        fc = (3 if self.method == "eagle3" else 2) * h * h
        head = draft.vocab_size * h if self.method == "eagle3" else 0
        return (layer + fc + head + h) * target.dtype_bytes

    def with_draft(self, target):
        """``target`` holding the drafter: its weights and its attention layers' KV per token."""
        if target.is_hybrid:
            raise ConfigError(
                f"--speculative-config: {target.name} has layers that are not full attention; "
                "speculative decoding is modelled for models whose layers all attend to everything"
            )
        if self.method in ("eagle", "eagle3") and target.is_mla:
            raise ConfigError(
                f"--speculative-config: {self.method} drafts are Llama-style layers; {target.name} "
                "uses MLA: use method mtp (its own multi-token-prediction layer)"
            )
        draft = self.draft_model(target)
        return replace(
            target,
            draft_layers=draft.layers if draft is not None else 0,
            draft_weight_bytes=self.draft_weight_bytes(target),
        )

    def describe(self) -> str:
        return (
            f"speculative decoding: {self.method}, {self.num_speculative_tokens} draft tokens, acceptance "
            f"length {self.acceptance_length:g}"
        )


def _nesting(text: str) -> int:
    """The deepest nesting of [ and { in JSON text (brackets inside strings skipped), counted before parsing so
    that deep input cannot exhaust the parser's recursion."""
    depth = top = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            top = max(top, depth)
        elif c in "]}":
            depth -= 1
    return top


def parse_speculative(text: str | None, acceptance: float | None) -> SpeculativeConfig | None:
    """``--speculative-config`` (vLLM's JSON: method, num_speculative_tokens; kvsim also reads draft_vocab_size
    and num_nextn_predict_layers) with ``--acceptance-length``; None when speculative decoding is off."""
    if text is None or not str(text).strip():
        if acceptance is not None:
            raise ConfigError("--acceptance-length: needs --speculative-config (it says what each verify step gains)")
        return None
    text = str(text)
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(
            f"--speculative-config: {len(text):,} characters; a JSON object of at most {MAX_CONFIG_CHARS:,} is expected"
        )
    depth = _nesting(text)
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigError(f"--speculative-config: nested {depth} levels deep; at most {MAX_CONFIG_DEPTH} are read")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"--speculative-config: not JSON ({e.msg} at character {e.pos}): {reprlib.repr(text)}"
        ) from None
    except (ValueError, RecursionError) as e:  # an integer of over 4,300 digits
        raise ConfigError(f"--speculative-config: not readable JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"--speculative-config: must be a JSON object, got {reprlib.repr(text)}")
    method = d.get("method")
    if method not in METHODS:
        raise ConfigError(
            f"--speculative-config: method must be one of {', '.join(METHODS)}, got {reprlib.repr(method)}"
        )

    def whole(key: str, default, top: int) -> int:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise ConfigError(
                f"--speculative-config: {key} must be a whole number from 1 to {top:,}, got "
                f"{shown(v) if isinstance(v, int) else reprlib.repr(v)}"
            )
        return v

    k = whole("num_speculative_tokens", None, MAX_SPECULATIVE_TOKENS)
    vocab = whole("draft_vocab_size", EAGLE3_DRAFT_VOCAB, 1 << 24) if method == "eagle3" else 0
    layers = whole("num_nextn_predict_layers", 1, 8) if method == "mtp" else 1
    unknown = sorted(
        set(d)
        - {
            "method",
            "num_speculative_tokens",
            "draft_vocab_size",
            "num_nextn_predict_layers",
            "model",
            "draft_tensor_parallel_size",
            "prompt_lookup_max",
            "prompt_lookup_min",
        }
    )
    if unknown:
        names = ", ".join(k.encode("unicode_escape").decode() for k in unknown)  # a newline in a key stays one line
        raise ConfigError(f"--speculative-config: kvsim does not model {names}")
    if acceptance is None:
        raise ConfigError(
            "--speculative-config needs --acceptance-length: the tokens a sequence gains per verify "
            "step, bonus included (vLLM logs it as 'Mean acceptance length'; it depends on the "
            "drafter and the traffic)"
        )
    if not 1.0 <= acceptance <= k + 1:
        raise ConfigError(f"--acceptance-length {acceptance:g}: must be from 1 to num_speculative_tokens + 1 ({k + 1})")
    return SpeculativeConfig(method, k, float(acceptance), vocab, layers)
