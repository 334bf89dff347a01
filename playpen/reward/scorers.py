"""Scorers: the one thing `playpen meter` measures with and GRPO's learned reward calls.

A scorer is named by
- a callable scorer: a built-in name (`vader`) or `package.module:function` taking a list of texts and returning
  one float each;
- a Hugging Face sequence classifier: a registry name (a run of `playpen train reward` registers one), a run
  folder, or a local *ForSequenceClassification folder.

`resolve_scorer` checks a name without loading weights (config files and the tokenizer only), so every bad input
is one PlaypenError line before anything is written: not a classifier, several labels and none chosen, a label
the head does not have, a tokenizer that does not belong to the model. `load_scorer` then loads it.

What a classifier scores: one logit (a reward model) is used as is; with several labels the softmax probability
of the chosen label. A model trained by `playpen train reward` on conversations (pairs with a prompt) scores the
prompt and the completion rendered with its chat template, as it was trained; otherwise the completion text alone
(with EOS appended, as TRL's RewardTrainer appends it to plain-text pairs).
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

from playpen.reading import read_json
from playpen.errors import PlaypenError

CALLABLE_SCORERS = {"vader": "playpen.reward.labellers:vader_compound"}
# written by `playpen train reward` into the model folder: {"format": "text" | "conversation", "num_labels": 1}
FORMAT_FILE = "playpen_reward.json"
MAX_LENGTH = 1024  # tokens scored per text; longer ones keep their end (the reply), as truncation_side="left"


@dataclass
class ScorerSpec:
    """A checked scorer, not loaded yet."""

    name: str
    kind: str                          # "callable" | "classifier"
    target: str = ""                   # callable: module:function
    model_path: str = ""               # classifier: the weights (the base model for an adapter)
    adapter: str | None = None         # classifier: a PEFT adapter folder on top of model_path
    tokenizer_path: str = ""
    num_labels: int = 1
    label: str | None = None           # chosen label name; None with a single-logit reward head
    label_index: int = 0
    input_format: str = "text"         # "text" | "conversation"
    threshold: float = 0.0             # default threshold for "share above" (meter)

    @property
    def description(self) -> str:
        if self.kind == "callable":
            return f"{self.name} ({self.target})"
        what = f"label {self.label}" if self.label else "reward logit"
        return f"{self.name} (sequence classifier, {what}, scores {self.input_format})"


def resolve_scorer(name: str, label: str | None = None, what: str = "--classifier") -> ScorerSpec:
    """A ScorerSpec for `name`, checked: one PlaypenError line on any problem."""
    if not name:
        raise PlaypenError(f"{what} is required (a sequence classifier or a callable scorer such as vader)")
    target = CALLABLE_SCORERS.get(name) or (name if _looks_like_target(name) else None)
    if target:
        function = _import_target(target, what)
        if label is not None:
            raise PlaypenError(f"{what} {name} is a callable scorer with one score per text; remove the label "
                               f"({label!r})")
        return ScorerSpec(name, "callable", target=target, threshold=float(getattr(function, "threshold", 0.0)))
    return _resolve_classifier(name, label, what)


def _looks_like_target(name: str) -> bool:
    module, sep, function = name.partition(":")
    return bool(sep and module and function.isidentifier() and "/" not in name)


def _import_target(target: str, what: str):
    module_name, _, attribute = target.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        raise PlaypenError(f"{what} {target}: cannot import it ({e})") from None
    if not callable(function):
        raise PlaypenError(f"{what} {target} is not callable")
    try:  # checked now, not with the first batch after the model loaded and generated
        inspect.signature(function).bind(["text"])
    except TypeError:
        raise PlaypenError(f"{what} {target} must take one argument, a list of texts, and return one number per "
                           f"text; its signature is {target.partition(':')[2]}{inspect.signature(function)}") from None
    except ValueError:  # no signature to read (some builtins): its first call says
        pass
    return function


def _read_json(path: Path) -> dict:
    data = read_json(path, "classifier file")
    return data if isinstance(data, dict) else {}


def _model_files(name: str, what: str) -> tuple[str, str | None, dict]:
    """(weights folder, adapter folder or None, registry spec or {}) for a folder, run folder or registry name."""
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.absolute()), None, {}
    from playpen.models.service import resolve

    spec = resolve(name, role=None)  # unknown names: one line with suggestions
    if spec.get("backend") != "huggingface_local" or not spec.get("huggingface_id"):
        raise PlaypenError(f"{what} {name} uses backend '{spec.get('backend')}', not a local sequence classifier")
    folder = Path(spec["huggingface_id"]).expanduser()
    if not (folder / "config.json").is_file():
        raise PlaypenError(f"{what} {name}: {folder} has no config.json (not a local Hugging Face model folder)")
    adapter = (spec.get("model_config") or {}).get("peft_model")
    return str(folder), adapter, spec


def _resolve_classifier(name: str, label: str | None, what: str) -> ScorerSpec:
    weights, adapter, _ = _model_files(name, what)
    config = _read_json(Path(weights) / "config.json")
    architectures = config.get("architectures") or ["unknown architecture"]
    marker = {}
    if adapter:
        adapter_dir = Path(adapter)
        adapter_config = _read_json(adapter_dir / "adapter_config.json") if adapter_dir.is_dir() else {}
        if adapter_config.get("task_type") != "SEQ_CLS":
            raise PlaypenError(f"{what} {name} is not a sequence classifier (an adapter of task "
                               f"{adapter_config.get('task_type', 'unknown')} on {architectures[0]}); train one with "
                               f"`playpen train reward` or give a *ForSequenceClassification folder")
        marker = _read_json(adapter_dir / FORMAT_FILE) if (adapter_dir / FORMAT_FILE).is_file() else {}
        labels = [str(i) for i in range(int(marker.get("num_labels", 1)))]
    else:
        if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
            raise PlaypenError(f"{what} {name} is not a sequence classifier ({', '.join(architectures)}); train one "
                               f"with `playpen train reward` or give a *ForSequenceClassification folder")
        marker = _read_json(Path(weights) / FORMAT_FILE) if (Path(weights) / FORMAT_FILE).is_file() else {}
        id2label = config.get("id2label") or {}
        count = len(id2label) or int(config.get("num_labels", 2))
        labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count)]
    index = _label_index(name, labels, label, what)
    input_format = marker.get("format", "text")
    tokenizer_path = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else weights
    _check_tokenizer(name, tokenizer_path, config, input_format, what)
    chosen = labels[index] if len(labels) > 1 else None
    return ScorerSpec(name, "classifier", model_path=weights, adapter=adapter, tokenizer_path=tokenizer_path,
                      num_labels=len(labels), label=chosen, label_index=index, input_format=input_format,
                      threshold=0.5 if chosen else 0.0)


def _label_index(name: str, labels: list[str], label: str | None, what: str) -> int:
    if len(labels) == 1:
        if label is not None and label not in (labels[0], "0"):
            raise PlaypenError(f"{what} {name} has a single reward output ({labels[0]}); remove label {label!r}")
        return 0
    flag = "reward_label:" if what.startswith("reward_model") else "--label"
    if label is None:
        raise PlaypenError(f"{what} {name} has {len(labels)} labels ({', '.join(labels)}); choose the one to score "
                           f"with {flag} <label>")
    if label in labels:
        return labels.index(label)
    if str(label).isdigit() and int(label) < len(labels):
        return int(label)
    raise PlaypenError(f"{what} {name} has no label {label!r}; its labels are: {', '.join(labels)}")


def _check_tokenizer(name: str, path: str, config: dict, input_format: str, what: str) -> None:
    """The classifier's tokenizer must belong to its model: every token id it produces must have an embedding."""
    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise PlaypenError(f"{what} {name}: no usable tokenizer in {path} ({' '.join(str(e).split())[:200]})") \
            from None
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if vocab and len(tokenizer) > int(vocab):
        raise PlaypenError(f"{what} {name}: incompatible tokenizer: it has {len(tokenizer)} tokens but the model "
                           f"embeds only {vocab} (the tokenizer in {path} belongs to another model)")
    if tokenizer.pad_token is None and tokenizer.eos_token is None:
        raise PlaypenError(f"{what} {name}: incompatible tokenizer: no pad or EOS token to batch texts with")
    if input_format == "conversation" and tokenizer.chat_template is None:
        raise PlaypenError(f"{what} {name} was trained on conversations but its tokenizer has no chat template")


class Scorer:
    """Scores completions: `scorer(completions, prompts=None) -> list[float]` (prompts: message lists);
    `rendered=True`: the texts are already what the classifier reads (e.g. a chat-templated game sequence)."""

    def __init__(self, spec: ScorerSpec, function=None, model=None, tokenizer=None, batch_size: int = 32):
        self.spec, self.function, self.model, self.tokenizer = spec, function, model, tokenizer
        self.batch_size = batch_size
        self.__name__ = "learned_reward"  # how TRL names it in its metrics (rewards/learned_reward/mean)

    def __call__(self, completions: list[str], prompts: list[list[dict]] | None = None,
                 rendered: bool = False) -> list[float]:
        if self.function is not None:
            returned = self.function(list(completions))
            try:
                scores = [float(s) for s in returned]
            except (TypeError, ValueError):
                raise PlaypenError(f"scorer {self.spec.target} must return one number per text, returned "
                                   f"{str(returned)[:80]}") from None
            if len(scores) != len(completions):
                raise PlaypenError(f"scorer {self.spec.target} returned {len(scores)} scores for "
                                   f"{len(completions)} texts")
            return scores
        texts = list(completions) if rendered else self._texts(completions, prompts)
        return [s for start in range(0, len(texts), self.batch_size)
                for s in self._score_batch(texts[start:start + self.batch_size])]

    def _texts(self, completions: list[str], prompts) -> list[str]:
        tokenizer = self.tokenizer
        if self.spec.input_format == "conversation" and prompts is not None:
            return [tokenizer.apply_chat_template([*p, {"role": "assistant", "content": c}], tokenize=False)
                    for p, c in zip(prompts, completions)]
        eos = tokenizer.eos_token or ""
        return [c if c.endswith(eos) else c + eos for c in completions]

    def _score_batch(self, texts: list[str]) -> list[float]:
        import torch

        device = next(self.model.parameters()).device
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=MAX_LENGTH,
                               add_special_tokens=self.spec.input_format == "text").to(device)
        with torch.inference_mode():
            logits = self.model(**batch).logits.float()
        if self.spec.num_labels == 1:
            return logits[:, 0].tolist()
        return torch.softmax(logits, dim=-1)[:, self.spec.label_index].tolist()


def load_scorer(spec: ScorerSpec, device: str | None = None, batch_size: int = 32) -> Scorer:
    """Load a resolved scorer (the classifier frozen, in eval mode, on `device` or the default device)."""
    if spec.kind == "callable":
        return Scorer(spec, function=_import_target(spec.target, "scorer"))
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(spec.model_path, num_labels=spec.num_labels,
                                                               dtype=torch.float32)
    if spec.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter, is_trainable=False)
    tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer_path)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
    model.config.pad_token_id = tokenizer.pad_token_id  # where the classifier finds each text's last token
    model.requires_grad_(False)
    model.eval()
    if device is None and torch.cuda.is_available():
        device = "cuda"
    if device:
        model.to(device)
    return Scorer(spec, model=model, tokenizer=tokenizer, batch_size=batch_size)
