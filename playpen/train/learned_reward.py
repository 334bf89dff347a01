"""RL against a learned reward: GRPO with `reward_model:` and a KL leash (`trainer.beta` > 0).

    playpen train grpo --config grpo/tiny_reward_model       # prompts: + reward_model:
    playpen train rloo --config rloo/tiny_sentiment          # the same with TRL's RLOOTrainer (rloo.py)
    playpen train grpo --config grpo/demo reward_model=<name> reward_weight=0.5

TRL 1.16 has no PPOTrainer; this is what replaces RewardLM's and trlX's PPO-against-a-classifier: GRPOTrainer
with the classifier as a reward function, and beta > 0 adding the per-token KL to the reference model (the base
model; with LoRA the model with adapters off) to the loss. TRL logs it per step as `kl` (metrics.jsonl, learning
curve). The reward is any scorer (`playpen.reward.scorers`): a reward model trained by `playpen train reward`,
another sequence classifier (`reward_label:` picks a label of a multi-label head), or a callable such as vader.

Two modes:
- `prompts:` a jsonl of prompts, single-turn: TRL samples group_size completions per prompt itself and the
  scorer scores each one (with the prompt, if the reward model was trained on conversations).
- `game:` the episodes of GameRollouts; the scorer scores each trained seat's whole learner sequence (prompt and
  completion tokens as the policy saw them, chat template included). TRL sums the rewards with
  `reward_weights` = [game_reward_weight, reward_weight] before normalising them per group.
"""
from __future__ import annotations

from playpen.errors import PlaypenError


def check(cfg, where: str) -> None:
    """GRPO's: the prompts file or the game, and the reward model, before anything is written."""
    if cfg.prompts:
        if cfg.game:
            raise PlaypenError(f"{where}: set either game (episodes) or prompts (single-turn), not both")
        if cfg.validation_instances:
            raise PlaypenError(f"{where}: validation_instances are game instances; with prompts use `playpen meter`")
        check_prompts(cfg, where)
    elif cfg.reward_model:
        _check_scorer(cfg)
    elif cfg.reward_label is not None:
        raise PlaypenError(f"{where}: reward_label chooses a label of reward_model, which is not set")


def check_prompts(cfg, where: str) -> None:
    """Single-turn RL (GRPO's prompts mode, RLOO): the prompts file and the reward model that scores them."""
    from playpen.reward.prompts import read_prompts

    if not cfg.reward_model:
        raise PlaypenError(f"{where}: prompts needs reward_model (a classifier or scorer to score completions)")
    read_prompts(cfg.prompts, where, "prompts")
    _check_scorer(cfg)


def _check_scorer(cfg) -> None:
    from playpen.reward.scorers import resolve_scorer

    resolve_scorer(cfg.reward_model, cfg.reward_label, what="reward_model")


def forced(cfg) -> dict:
    """TRL keys that follow from the reward keys: the weights of [game reward, learned reward]."""
    if cfg.reward_model and not cfg.prompts:
        return {"reward_weights": [float(cfg.game_reward_weight), float(cfg.reward_weight)]}
    return {}


def _scorer(session):
    from playpen.reward.scorers import load_scorer, resolve_scorer

    cfg = session.cfg
    spec = resolve_scorer(cfg.reward_model, cfg.reward_label, what="reward_model")
    scorer = load_scorer(spec, device=str(session.args.device))
    session.log(f"[playpen] learned reward: {spec.description}; KL weight beta {session.args.beta}")
    return scorer


def prompt_reward(session):
    """TRL reward function for prompt datasets: completions arrive as [{"role": "assistant", ...}] lists."""
    scorer = _scorer(session)

    def learned_reward(prompts, completions, **kwargs) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return scorer(texts, [p if isinstance(p, list) else [{"role": "user", "content": p}] for p in prompts])

    return learned_reward


def game_reward(session):
    """TRL reward function for game episodes: scores the `learner_text` that `with_learner_text` adds."""
    scorer = _scorer(session)

    def learned_reward(prompts, completions, learner_text, **kwargs) -> list[float]:
        return scorer(learner_text, rendered=True)

    return learned_reward


def with_learner_text(rollout_func, tokenizer):
    """The rollout function, its output extended by each trained sequence decoded (for the learned reward)."""

    def rollout(prompts, trainer) -> dict:
        out = rollout_func(prompts, trainer)
        out["learner_text"] = tokenizer.batch_decode([list(p) + list(c) for p, c in
                                                      zip(out["prompt_ids"], out["completion_ids"])])
        return out

    return rollout


def fit_on_prompts(session, trainer_class=None, limit: int | None = None):
    """Single-turn RL on a prompts jsonl against the learned reward (GRPOTrainer, or RLOOTrainer for `playpen
    train rloo`: both take the same reward functions), the first `limit` prompts after shuffling; returns the
    trainer."""
    import random

    from datasets import Dataset
    from trl import GRPOTrainer

    from playpen.reward.prompts import read_prompts

    cfg = session.cfg
    prompts = read_prompts(cfg.prompts, session.where, "prompts")
    random.Random(cfg.seed).shuffle(prompts)  # TRL's sampler does not shuffle (shuffle_dataset: False, see grpo)
    if limit:
        prompts = prompts[:limit]
    trainer_class = trainer_class or GRPOTrainer
    session.log(f"[playpen] {trainer_class.__name__} on {len(prompts)} prompts of {cfg.prompts}, "
                f"{cfg.group_size} completions each")
    trainer = trainer_class(model=session.model, reward_funcs=[prompt_reward(session)], args=session.args,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                          processing_class=session.tokenizer, peft_config=session.peft_config,
                          callbacks=session.callbacks(resumed_step=session.state["step"]))
    trainer.train(resume_from_checkpoint=str(session.resume) if session.resume else None)
    return trainer
