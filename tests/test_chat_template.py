"""The chat endpoint's per-request template parse (kvsim/chat_template.py): which vLLM releases pay it (0.6.4-0.9.1:
7 ms, 0.11.0: 15 ms), that the completions endpoint, gpt-oss (Harmony) and a current release do not, and that a
chat request's intake grows by exactly that much (hand-computed single requests and a queue)."""

import json

import pytest

from kvsim.chat_template import chat_template_s
from kvsim.errors import ConfigError
from kvsim.frontend import V1_DELIVER_S, V1_TOKEN_S, get_frontend
from kvsim.options import config_from_args
from kvsim.runner import simulate
from kvsim.trace.request import Request


# gpt-oss-20b's config.json, the fields kvsim reads
GPT_OSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "quantization_config": {"quant_method": "mxfp4"},
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "release, seconds",
    [
        ("0.6.3", 0.0),  # before PR #9919's content-format detection
        ("0.6.4", 7e-3),
        ("0.8.5", 7e-3),
        ("0.9.1", 7e-3),
        ("0.9.2", 0.0),  # PR #20065 cached it
        ("0.10.2", 0.0),
        ("0.11.0", 15e-3),  # resolve_chat_template_kwargs parsed it again
        ("0.11.0+cu128", 15e-3),
        ("0.11.1", 0.0),  # cached
        ("0.19", 0.0),
        (None, 0.0),  # a current release
    ],
)
def test_releases_that_parse_the_template_per_request(release, seconds):
    assert chat_template_s(release, "jinja", "chat") == seconds
    assert chat_template_s(release, "jinja", "completions") == 0.0


def test_harmony_models_render_without_the_template(tmp_path):
    """gpt-oss renders with Harmony, whether named by preset, by id or by a config.json in any folder."""
    cfg = tmp_path / "my-model" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(GPT_OSS_CONFIG))
    for model in ("gpt-oss-120b", "openai/gpt-oss-20b", str(cfg)):
        c = config_from_args(["--model", model, "--gpu", "h100-80gb", "--vllm-version", "0.11.0", "--endpoint", "chat"])
        assert c.model.chat_renderer == "harmony"
        assert c.serving_frontend().template_s == 0.0
        assert chat_template_s("0.11.0", c.model.chat_renderer, "chat") == 0.0
    scout = config_from_args(["--model", "llama-4-scout", "--vllm-version", "0.11.0", "--endpoint", "chat"])
    assert scout.model.chat_renderer == "jinja"
    assert scout.serving_frontend().template_s == 15e-3


def test_only_an_api_server_parses():
    assert get_frontend("vllm", template_s=0.015).intake_s(0) == pytest.approx(1.5e-3 + 0.015, rel=1e-12)
    assert get_frontend("none", template_s=0.015).intake_s(0) == 0.0
    assert not get_frontend("none", template_s=0.015).active


def _run(reqs, *args):
    cfg = config_from_args(["--model", "qwen3-8b", "--gpu", "h100-80gb", "--max-model-len", "4096", *args])
    return simulate(reqs, cfg, "paged:16").requests


def test_chat_requests_wait_behind_each_others_parse():
    """Three 100-token prompts sent at once to vLLM 0.11.0's chat endpoint: one API server's event loop runs their
    handlers one after another, each 1.5 ms + 15 ms (the parse), while its tokenizer thread takes each prompt
    (100 x 2.5 us) once its handler is done; a hand-off queues behind the handlers sent before its prompt came
    back, so the first two reach the engine when the third's handler ends (3 x 16.5 ms) and the third a
    tokenization later. On the completions endpoint the handlers are 15 ms shorter, and on 0.11.1 too."""
    reqs = [Request(str(i), 0.0, 100, 2) for i in range(3)]
    tok = 100 * V1_TOKEN_S
    chat = _run(reqs, "--vllm-version", "0.11.0", "--endpoint", "chat")
    plain = _run(reqs, "--vllm-version", "0.11.0")  # completions, the default
    intake = lambda r: (r.frontend_s - V1_DELIVER_S).tolist()  # noqa: E731
    handler = 1.5e-3 + 15e-3
    assert intake(chat) == pytest.approx([3 * handler, 3 * handler, 3 * handler + tok], rel=1e-9)
    assert intake(plain) == pytest.approx([3 * 1.5e-3, 3 * 1.5e-3, 3 * 1.5e-3 + tok], rel=1e-9)
    newer = _run(reqs, "--vllm-version", "0.11.1", "--endpoint", "chat")
    assert intake(newer) == pytest.approx(intake(plain), rel=1e-12)


def test_unknown_endpoint_is_refused_by_name():
    with pytest.raises(ConfigError, match="endpoint"):
        config_from_args(["--endpoint", "embeddings"])
