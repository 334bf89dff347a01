"""vLLM as the rollout engine's generator (playpen.rollout.vllm_backend, playpen.models.vllm_engine), against
playpen's own Hugging Face loop and the model itself, on playpen-tiny with a LoRA adapter, float32 both sides:

- greedy multi-turn episodes (wordle) of both generators: the same learner tokens, episode by episode;
- the log-probabilities vLLM reports for the tokens it sampled equal the model's own recomputation;
- weights follow training: after an optimizer step on the adapter, a stale engine still scores a fixed reply
  as the old weights do, and after `sync_weights` as the new ones do.

One engine for the module (loading one takes ~15-30 s). GRPO with use_vllm learning the known answer is in
test_grpo_correctness.py, beside the same test with playpen's loop.
"""
from __future__ import annotations

import pytest
import torch

from tests.helpers import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]

EPISODES = 56  # greedy wordle episodes compared (multi-turn: up to 6 guesses each)
AGREEMENT_FLOOR = 0.9  # share of episodes whose learner tokens must be identical (float32 on both sides)
LOGPROB_BOUND = 1e-3  # max |vLLM's sampled-token logprob - the model's| (float32; measured ~3e-6)


@pytest.fixture(scope="module")
def tiny_lora(tiny):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    with torch.no_grad():  # an adapter that changes the model (LoRA's B starts at 0)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(tiny))


@pytest.fixture(scope="module")
def engine(tiny_lora):
    from playpen.models.vllm_engine import start_colocated

    model, tokenizer = tiny_lora
    engine = start_colocated(model, tokenizer, dtype="float32", max_model_len=2048, seed=0)
    engine.sync_weights()  # vLLM loaded the base model's files: merge the adapter in
    return engine


def play(model, tokenizer, engine, temperature: float, n: int, seed: int = 0):
    from playpen.games.instances import load_instances
    from playpen.rollout import LocalPolicy, RolloutEngine
    from playpen.rollout.vllm_backend import VLLMGenerator

    policy = LocalPolicy(model, tokenizer, name="tiny-lora")
    if engine is not None:
        policy.vllm = VLLMGenerator(engine.llm, seed)
    rollout = RolloutEngine(policy, max_new_tokens=16, temperature=temperature, batch_size=64, seed=seed,
                            progress=False)
    return rollout.play("wordle", load_instances("wordle", "train", limit=n, seed=0))


def learner_tokens(episode) -> list[int]:
    trace = episode.traces[0]
    return [t for t, m in zip(trace.completion_ids, trace.env_mask) if m]


def test_greedy_episodes_of_both_generators_agree(tiny_lora, engine, capsys):
    model, tokenizer = tiny_lora
    hf = play(model, tokenizer, None, 0.0, EPISODES)
    vllm = play(model, tokenizer, engine, 0.0, EPISODES)
    assert len(hf) == len(vllm) == EPISODES
    turns = sum(e.traces[0].learner_turns for e in hf)
    same = sum(learner_tokens(a) == learner_tokens(b) for a, b in zip(hf, vllm))
    with capsys.disabled():
        print(f"\n[vllm] greedy wordle: {same}/{EPISODES} episodes with identical learner tokens ({turns} turns)")
    assert turns > EPISODES  # multi-turn
    assert same / EPISODES >= AGREEMENT_FLOOR
    assert [e.success for e in hf] == [e.success for e in vllm] or same < EPISODES


def test_sampled_token_logprobs_equal_the_models(tiny_lora, engine, capsys):
    """vLLM's logprob of each token it sampled (T=1.3, processed: after temperature) against the model's
    log-softmax(logits / T) of the same token in the same context, as TRL's loss recomputes it."""
    model, tokenizer = tiny_lora
    temperature = 1.3
    diffs = []
    for episode in play(model, tokenizer, engine, temperature, 12, seed=3):
        trace = episode.traces[0]
        ids = torch.tensor([trace.prompt_ids + trace.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(trace.prompt_ids) - 1:-1].float() / temperature
        recomputed = torch.log_softmax(logits, -1).gather(1, torch.tensor(trace.completion_ids)[:, None])[:, 0]
        for mask, sampled, again in zip(trace.env_mask, trace.logprobs, recomputed.tolist()):
            if mask:
                diffs.append(abs(sampled - again))
    mean, worst = sum(diffs) / len(diffs), max(diffs)
    with capsys.disabled():
        print(f"\n[vllm] sampled-token logprobs vs the model: mean |d| {mean:.2e}, max {worst:.2e} "
              f"over {len(diffs)} tokens")
    assert len(diffs) > 50 and worst <= LOGPROB_BOUND


def reply_logprobs(engine, ids: list[int], reply: int) -> torch.Tensor:
    """vLLM's logprobs of the last `reply` tokens of `ids`, scored as a prompt (nothing sampled)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    out = engine.llm.generate([TokensPrompt(prompt_token_ids=ids)],
                              SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0), use_tqdm=False)[0]
    return torch.tensor([entry[token].logprob for token, entry in zip(ids[-reply:], out.prompt_logprobs[-reply:])])


def model_logprobs(model, ids: list[int], reply: int) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -reply - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[-reply:])[:, None])[:, 0]


def test_weights_follow_an_optimizer_step_only_after_sync(tiny_lora, engine):
    model, tokenizer = tiny_lora
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Guess a five-letter word."}],
                                           add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt + "guess: crane", add_special_tokens=False)["input_ids"]
    reply = len(tokenizer("guess: crane", add_special_tokens=False)["input_ids"])
    old = model_logprobs(model, ids, reply)
    assert torch.allclose(reply_logprobs(engine, ids, reply), old, atol=1e-4)
    # one optimizer step on the adapter, towards the reply
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=5.0)
    model.train()
    loss = -torch.log_softmax(model(torch.tensor([ids])).logits[0, -reply - 1:-1], -1).gather(
        1, torch.tensor(ids[-reply:])[:, None]).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()
    new = model_logprobs(model, ids, reply)
    assert (new - old).abs().max() > 0.1  # the step moved the reply's logprobs
    stale = reply_logprobs(engine, ids, reply)
    assert torch.allclose(stale, old, atol=1e-4) and not torch.allclose(stale, new, atol=1e-2)
    engine.sync_weights()
    assert torch.allclose(reply_logprobs(engine, ids, reply), new, atol=1e-4)
