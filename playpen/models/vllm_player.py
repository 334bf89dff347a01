"""A clemcore player whose replies vLLM generates: clemcore's Hugging Face backend, with vLLM in place of
`model.generate` (debate tournaments and other runs through clemcore's own runner, `use_vllm: true`).

    player = VLLMPlayer.load(spec, max_tokens=48, temperature=0.0)   # a huggingface_local spec, resolved

It renders prompts and cleans replies exactly as `HuggingfaceLocalModel` does (its chat template, its
`split_and_clean_batch_outputs`), so records read the same; only the tokens come from a colocated vLLM engine of
the same weights (an adapter merged in, float32 on CPU, bfloat16 on GPUs). Greedy replies are the backend's own
where the numerics allow (tests/test_vllm_player.py).

What it is not: a trainer's engine (playpen.models.vllm_engine syncs those); the weights here are frozen.
"""
from __future__ import annotations

from typing import Any

from playpen.errors import PlaypenError

UNSUPPORTED = ("cot_bypass", "cot_effort", "cot_output", "chat_template_language")  # model_config keys


def check_vllm_player(spec: dict, what: str) -> None:
    """A spec the vLLM player can serve, or one line why not."""
    from playpen.models.loading import spec_quantization

    if spec.get("backend") != "huggingface_local":
        raise PlaypenError(f"{what}: {spec.get('model_name')} uses backend {spec.get('backend')}; use_vllm serves "
                           f"local Hugging Face models only (the others are played as they are: set use_vllm: false)")
    if spec_quantization(spec):
        raise PlaypenError(f"{what}: {spec['model_name']} is loaded quantized (bitsandbytes), which vLLM does not "
                           f"load here; set use_vllm: false")
    unsupported = [k for k in UNSUPPORTED if (spec.get("model_config") or {}).get(k)]
    if unsupported:
        raise PlaypenError(f"{what}: {spec['model_name']} sets {', '.join(unsupported)} in its model_config, which "
                           f"the vLLM player does not render; set use_vllm: false")


def _player_class():
    from clemcore.backends.huggingface_local_api import (HuggingfaceLocalModel, _context_size_from_config,
                                                         load_config_and_tokenizer, split_and_clean_batch_outputs)
    from clemcore.backends.model_registry import BatchGenerativeModel, ModelSpec

    class VLLMPlayer(HuggingfaceLocalModel):
        """HuggingfaceLocalModel without its transformers weights: vLLM generates."""

        @classmethod
        def load(cls, spec: dict, max_tokens: int, temperature: float, seed: int = 0) -> "VLLMPlayer":
            check_vllm_player(spec, "use_vllm")
            player = cls(ModelSpec.from_dict(spec), seed)
            player.set_gen_args(max_tokens=max_tokens, temperature=temperature)
            return player

        def __init__(self, model_spec: Any, seed: int = 0):  # (not the parent's: it would load the weights)
            import torch

            from playpen.models.loading import load_frozen
            from playpen.models.vllm_engine import start_colocated

            BatchGenerativeModel.__init__(self, model_spec)
            self.tokenizer, self.config = load_config_and_tokenizer(model_spec)
            self.context_size = _context_size_from_config(self.config, model_spec, self.tokenizer)
            self.chat_template_kwargs = model_spec.model_config.get("chat_template_kwargs", {})
            model, _ = load_frozen(model_spec.to_dict())
            dtype = "bfloat16" if next(model.parameters()).dtype == torch.bfloat16 else "float32"
            self.engine = start_colocated(model, self.tokenizer, dtype=dtype,
                                          max_model_len=min(self.context_size, 4096), memory_fraction=0.9, seed=seed)
            if hasattr(model, "peft_config"):  # vLLM loaded the base model's files: the adapter is merged in now
                self.engine.sync_weights()
            self.top_p = getattr(model.generation_config, "top_p", None) or 1.0
            self.device = "cpu"

        def _generate_batch_response(self, batch_messages: list[list[dict]]) -> list[tuple[Any, Any, str]]:
            import torch
            from clemcore.backends.huggingface_local_api import assert_context_limits
            from vllm import SamplingParams
            from vllm.inputs import TokensPrompt

            rendered = self.tokenizer.apply_chat_template(batch_messages, add_generation_prompt=True, tokenize=False,
                                                          **self._chat_template_kwargs)
            prompts = [self.tokenizer(text, add_special_tokens=False)["input_ids"] for text in rendered]
            for ids in prompts:
                assert_context_limits(self, torch.tensor([ids]))
            params = SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature,
                                    top_p=self.top_p if self.temperature > 0 else 1.0, detokenize=False,
                                    skip_special_tokens=False)
            outputs = self.engine.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params,
                                               use_tqdm=False)
            full = [self.tokenizer.decode(ids + list(out.outputs[0].token_ids)) for ids, out in zip(prompts, outputs)]
            prompt_texts = [self.tokenizer.decode(ids) for ids in prompts]
            infos, texts, responses = split_and_clean_batch_outputs(self, full, prompt_texts)
            return list(zip(infos, responses, texts))

    return VLLMPlayer


def load_vllm_player(spec: dict, max_tokens: int, temperature: float, seed: int = 0) -> Any:
    """`VLLMPlayer.load(...)`: clemcore and vLLM are imported only when a player is asked for."""
    return _player_class().load(spec, max_tokens, temperature, seed)
