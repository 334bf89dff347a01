"""The bundled tiny model loads through the same code paths as any Hugging Face model."""
from __future__ import annotations

import hashlib
from pathlib import Path


from playpen.models.tiny import build, ensure_tiny_model
from playpen.model_registry import resolve_model

CONVERSATIONS = [[{"role": "user", "content": f"Say the number {i}."},
                  {"role": "assistant", "content": f"ANSWER: {i}"}] for i in range(40)]


def weights_digest(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_build_is_deterministic(tmp_path):
    first = build(tmp_path / "a", CONVERSATIONS, log=lambda *_: None, steps=5, batch_size=4)
    second = build(tmp_path / "b", CONVERSATIONS, log=lambda *_: None, steps=5, batch_size=4)
    assert weights_digest(first) == weights_digest(second)
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()


def test_tiny_model_loads_with_auto_classes_and_masks_assistant_tokens():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "llama"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "GUESS: crane"}]
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tokenizer.decode(masked) == "GUESS: crane<|im_end|>"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|pad|>"


def test_tiny_model_plays_through_clemcore_backend():
    from clemcore.backends import BackendRegistry, ModelSpec

    ensure_tiny_model()
    spec = ModelSpec.from_dict(resolve_model("playpen-tiny"))
    model = BackendRegistry.from_packaged_and_cwd_files().get_backend_for("huggingface_local").get_model_for(spec)
    model.set_gen_args(temperature=0.0, max_tokens=12)
    _, _, text = model.generate_response([{"role": "user", "content": "Let's play. Your guess?"}])
    assert isinstance(text, str) and "<|im_end|>" not in text
