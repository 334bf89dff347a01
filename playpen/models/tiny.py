"""playpen-tiny: the bundled default learner and teacher, built here, never downloaded.

A byte-level BPE tokenizer with a ChatML template and a ~1M-parameter Llama, trained for a few hundred steps on
expert transcripts of the built-in games (`playpen.games.demonstrations`), so it follows each game's output
format some of the time: enough reward signal for RL, far from solving the games. It is saved as a normal
Hugging Face folder and loaded through the same code path as any hub model (AutoModelForCausalLM,
clemcore's huggingface_local backend).

The build is shipped in the package (`playpen/models/playpen-tiny/`, ~3 MB) because pretraining takes minutes
on 2 busy cores; `playpen models build-tiny --force` rebuilds it from this recipe (seeded: the same
commit gives the same weights on the same torch build).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from playpen.model_registry import TINY_MODEL
from playpen.storage import atomic_write_json, check_own_output, exclusive_folder, replace_folder, staging_folder

BUILD_FILE = "playpen_build.json"  # written last into a build: marks a folder as this tool's own output
BUILD_VERSION = 4  # bump when the recipe changes: an older build is then rebuilt on first use
SEED = 1234
VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# ChatML; {% generation %} marks assistant tokens so TRL's assistant_only_loss can find them.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{%- else %}{{- message['content'] + '<|im_end|>' }}{%- endif %}"
    "{{- '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
MODEL_SHAPE: dict[str, Any] = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=2048)  # LlamaConfig's kwargs
PRETRAIN = dict(steps=400, batch_size=16, lr=3e-3, max_len=768, episodes_per_game=400)


def default_path() -> Path:
    return Path(__file__).parent / TINY_MODEL


def build_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>",
                                   unk_token=None, bos_token=None, chat_template=CHAT_TEMPLATE,
                                   model_max_length=MODEL_SHAPE["max_position_embeddings"])


def build_model(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, **MODEL_SHAPE)
    return LlamaForCausalLM(config)


def _encode(tokenizer, conversations: list[list[dict]], max_len: int):
    """Token ids and a loss mask that is 1 on assistant tokens only (what the player must learn to say)."""
    examples = []
    for messages in conversations:
        out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        ids, mask = out["input_ids"][:max_len], out["assistant_masks"][:max_len]
        if any(mask):
            examples.append((ids, mask))
    return examples


def pretrain(model, tokenizer, conversations: list[list[dict]], steps: int, batch_size: int, lr: float,
             max_len: int, log=print) -> list[float]:
    import torch

    examples = _encode(tokenizer, conversations, max_len)
    rng = random.Random(SEED)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    losses = []
    for step in range(steps):
        batch = rng.sample(examples, min(batch_size, len(examples)))
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, mask) in enumerate(batch):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            labels[row, :len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask)])
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            log(f"[playpen-tiny] step {step:4d}/{steps} loss {loss.item():.3f}")
    model.eval()
    return losses


def demonstration_corpus(episodes_per_game: int) -> list[list[dict]]:
    from playpen.games import demonstrations

    return demonstrations(episodes_per_game=episodes_per_game, seed=SEED)


def build(out: Path, conversations: list[list[dict]] | None = None, log=print, **overrides) -> Path:
    """Build into a private staging folder that then replaces `out` whole, so a half-built model is never picked
    up and nothing is written through a link planted in a shared $PLAYPEN_HOME. `out` must be missing, empty or
    an earlier build (its BUILD_FILE): a folder of the user's is never deleted."""
    import torch

    check_own_output(out, BUILD_FILE, "--out")

    recipe = {**PRETRAIN, **overrides}
    torch.set_num_threads(1)  # one thread is as fast at this size and the result does not depend on core count
    torch.manual_seed(SEED)
    random.seed(SEED)
    started = time.time()
    conversations = conversations if conversations is not None else demonstration_corpus(recipe["episodes_per_game"])
    texts = [m["content"] for conv in conversations for m in conv]
    tokenizer = build_tokenizer(texts)
    model = build_model(tokenizer)
    losses = pretrain(model, tokenizer, conversations, recipe["steps"], recipe["batch_size"], recipe["lr"],
                      recipe["max_len"], log=log)
    check_own_output(out, BUILD_FILE, "--out")  # (again: minutes passed)
    tmp = staging_folder(out, out.parent)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {"build_version": BUILD_VERSION, "seed": SEED, "recipe": recipe, "conversations": len(conversations),
            "parameters": sum(p.numel() for p in model.parameters()), "first_loss": losses[0],
            "final_loss": sum(losses[-20:]) / min(20, len(losses)), "seconds": round(time.time() - started, 1)}
    atomic_write_json(tmp / BUILD_FILE, info)
    replace_folder(tmp, out, out.parent)
    log(f"[playpen-tiny] built {out} ({info['parameters']:,} parameters, loss {info['first_loss']:.2f} → "
        f"{info['final_loss']:.2f}, {info['seconds']} s)")
    return out


def is_built(path: Path) -> bool:
    info = path / BUILD_FILE
    return info.is_file() and json.loads(info.read_text()).get("build_version") == BUILD_VERSION


def ensure_tiny_model(path: Path | None = None, log=print) -> Path:
    """Build if the shipped copy is missing or stale; a lock makes concurrent jobs wait, not build twice."""
    path = path or default_path()
    if is_built(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)  # (an OSError here: ensure_packaged_weights names $PLAYPEN_HOME)
    with build_lock(path, log):
        if not is_built(path):
            build(path, log=log)
    return path


def build_lock(path: Path, log):
    """The storage lock on `.<name>.lock` beside `path`, waited for: one process builds a model folder at a time."""
    return exclusive_folder(path.parent, f"{path} is being built", "wait for it", lock_file=f".{path.name}.lock",
                            waiting=lambda holder: log(f"[{path.name}] another process ({holder}) is building "
                                                       f"{path}; waiting for it"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="target folder (default: the packaged "
                        "playpen/models/playpen-tiny)")
    parser.add_argument("--force", action="store_true", help="rebuild even if an up-to-date build exists")


def main(args: argparse.Namespace) -> int:
    """`playpen models build-tiny`: the folder on stdout, built or up to date (scripts read it)."""
    out = check_own_output(args.out or default_path(), BUILD_FILE, "--out")
    if args.force or not is_built(out):
        with build_lock(out, lambda line: print(line, file=sys.stderr)):
            build(out)
    print(out)
    return 0


if __name__ == "__main__":  # python -m playpen.models.tiny: an alias of `playpen models build-tiny`
    from playpen.errors import run_command

    sys.exit(run_command("playpen models build-tiny", add_arguments, main))
