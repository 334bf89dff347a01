"""A local Hugging Face causal LM as a rollout policy, and its stand-in clemcore Model.

`LocalPolicy` wraps any causal LM + tokenizer (a plain model, a PeftModel, the model a TRL trainer is training).
The engine generates for it in batches with its own KV-cached decoding loop (`playpen.rollout.generation`).
Game masters never call a model themselves: they get a `PolicyModel`, a clemcore `Model` that names the policy
(so records say who played) and that can still answer clemcore's `generate_response` when used outside the
engine, e.g. in clemcore's own runners.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from clemcore import backends
from clemcore.backends.utils import ensure_alternating_roles

BACKEND_NAME = "playpen_local"
_REPLY = "\u2063PLAYPEN_REPLY\u2063"  # sentinels no game text contains (U+2063, invisible separator)
_CONTENT = "\u2063PLAYPEN_CONTENT\u2063"


class LocalPolicy:
    """A causal LM and its tokenizer, ready for chat rollouts.

    name: shown in records (`playpen-records/<name>/...`); defaults to the model folder's name.
    chat_template_kwargs: extra variables for the chat template (e.g. {"enable_thinking": False} for Qwen3).
    """

    def __init__(self, model, tokenizer, *, name: str | None = None, chat_template_kwargs: dict | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; LocalPolicy needs one to render conversations")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or _default_name(model)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.vllm = None  # a VLLMGenerator (vllm_backend.py): vLLM generates this policy's replies, not generation.py
        self.stop_ids = _stop_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stop_ids)
        self._eos_texts = {tokenizer.convert_ids_to_tokens(i): i for i in self.stop_ids}
        self._encoded: dict[str, tuple[int, ...]] = {}  # the episodes of a group start from the same prompt
        self._suffixes: dict[tuple, str | None] = {}  # see suffix_after_reply

    def __repr__(self):
        return f"LocalPolicy({self.name!r})"

    def __deepcopy__(self, memo):  # game states are deep-copied when branching; the model never is
        return self

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int | None:
        config = getattr(self.model, "config", None)
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        return getattr(config, "max_position_embeddings", None)

    # ------------------------------------------------------------ chat rendering

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                  tokenize=False, **self.chat_template_kwargs)

    def encode(self, text: str) -> list[int]:
        ids = self._encoded.get(text)
        if ids is None:
            if len(self._encoded) >= 4096:
                self._encoded.clear()
            # the template already holds any BOS token, exactly as clemcore's huggingface backend tokenizes
            ids = self._encoded[text] = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def suffix_after_reply(self, messages: list[dict], next_message: dict | None, reply_ended_with_stop: bool) -> str:
        """Template text that follows the last assistant reply: its end-of-turn marker, then (if given) the next
        user message and the generation prompt. Found by rendering the conversation with a sentinel reply, so it
        works for any template that renders earlier turns verbatim.

        Rendering the whole conversation every turn is the engine's largest cost outside generation, so the
        suffix is kept per (roles so far, next role) with a placeholder for the next message's text. A kept
        suffix is used only where it was checked against a full render once and the text has no edge
        whitespace (templates may trim it); otherwise the conversation is rendered."""
        content = next_message.get("content") if next_message is not None else None
        next_role = next_message["role"] if next_message is not None else None
        key = (tuple(m["role"] for m in messages), next_role, reply_ended_with_stop)
        usable = content is None or (isinstance(content, str) and content == content.strip()
                                     and _CONTENT not in content)
        cached = self._suffixes.get(key) if usable else None
        if cached is not None:
            return cached.replace(_CONTENT, content) if content is not None else cached
        suffix = self._render_suffix(messages, next_message, reply_ended_with_stop)
        if usable and key not in self._suffixes:  # None marks a key whose check failed: always rendered
            placeholder = None if content is None else {**next_message, "content": _CONTENT}
            kept = self._render_suffix(messages, placeholder, reply_ended_with_stop) if placeholder else suffix
            agrees = (kept.replace(_CONTENT, content) if content is not None else kept) == suffix
            self._suffixes[key] = kept if agrees else None
        return suffix

    def _render_suffix(self, messages: list[dict], next_message: dict | None, reply_ended_with_stop: bool) -> str:
        probe = [*messages[:-1], {"role": "assistant", "content": _REPLY}]
        if next_message is not None:
            probe.append(next_message)
        text = self.render(probe, add_generation_prompt=next_message is not None)
        at = text.rfind(_REPLY)
        if at < 0:
            raise ValueError("the chat template does not render the assistant reply verbatim")
        suffix = text[at + len(_REPLY):]
        if reply_ended_with_stop:
            for eos_text in self._eos_texts:
                if eos_text and suffix.startswith(eos_text):
                    return suffix[len(eos_text):]
        return suffix

    # ------------------------------------------------------------ plain generation (outside the engine)

    def generate_texts(self, conversations: list[list[dict]], max_new_tokens: int, temperature: float) -> list[str]:
        from playpen.rollout.generation import Sequence, generate

        seqs = [Sequence(self.encode(self.render(ensure_alternating_roles(m), True))) for m in conversations]
        outs = generate(self, seqs, max_new_tokens=max_new_tokens, temperature=temperature, keep_cache=False)
        return [clean_reply(self.decode(o.reply_ids)) for o in outs]


def clean_reply(text: str) -> str:
    """What the game master receives, as clemcore's huggingface backend would hand it over."""
    return text.strip()


def _default_name(model) -> str:
    base = getattr(model, "base_model", None)
    for candidate in (model, getattr(base, "model", None), base):
        path = getattr(getattr(candidate, "config", None), "_name_or_path", "")
        if path:
            return Path(str(path)).name or "local-model"
    return "local-model"


def _stop_ids(model, tokenizer) -> list[int]:
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(i) for i in eos)
    if not ids:
        raise ValueError("neither the tokenizer nor the generation config names an end-of-sequence token")
    return sorted(ids)


class PolicyModel(backends.BatchGenerativeModel):
    """The clemcore Model a game master sees for a LocalPolicy seat. Deep copies share the policy."""

    def __init__(self, policy: LocalPolicy, max_tokens: int, temperature: float):
        spec = backends.ModelSpec(model_name=policy.name, backend=BACKEND_NAME)
        super().__init__(spec)
        self.policy = policy
        self.set_gen_args(max_tokens=max_tokens, temperature=temperature)

    def __deepcopy__(self, memo):
        return self

    def generate_response(self, messages: list[dict]) -> tuple[Any, Any, str]:
        return self.generate_batch_response([messages])[0]

    def generate_batch_response(self, batch_messages: list[list[dict]]) -> list[tuple[Any, Any, str]]:
        texts = self.policy.generate_texts(batch_messages, self.max_tokens, self.temperature)
        return [({"inputs": m}, {"response": t}, t) for m, t in zip(batch_messages, texts)]


def partner_model(partner, max_new_tokens: int, temperature: float):
    """The clemcore Model the engine seats for its partner: None, a LocalPolicy (a PolicyModel, generated for in
    the engine's waves), "programmatic" (the games' scripted players), a registered model name or a clemcore Model
    (given max_tokens and temperature where it has none)."""
    from playpen.errors import PlaypenError

    if partner is None:
        return None
    if isinstance(partner, LocalPolicy):
        return PolicyModel(partner, max_new_tokens, temperature)
    if isinstance(partner, str):
        if partner in backends.ModelSpec.PROGRAMMATIC_SPECS:
            return backends.CustomResponseModel()
        from playpen.models import service

        return service.load_player(service.resolve(partner, "partner"), max_new_tokens, temperature)
    if isinstance(partner, backends.Model):
        if "max_tokens" not in partner.gen_args or "temperature" not in partner.gen_args:
            partner.set_gen_args(**{"max_tokens": max_new_tokens, "temperature": temperature, **partner.gen_args})
        return partner
    raise PlaypenError(f"partner must be None, a LocalPolicy, a clemcore Model or a model name "
                       f"(got {type(partner).__name__})")
