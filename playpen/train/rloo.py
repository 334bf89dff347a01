"""RLOO against a learned reward on prompts: TRL's RLOOTrainer (REINFORCE with a leave-one-out baseline: each
completion is compared with the mean reward of the other completions of its prompt), `trainer.beta` for the KL
to the reference model, as RewardLM and trlX do it with PPO (which TRL 1.16 no longer has).

    playpen train rloo --config rloo/tiny_sentiment [key=value ...]

Games stay GRPO's: their multi-turn episodes need GRPOTrainer's rollout_func. RLOO takes a prompts jsonl and a
reward_model (a classifier trained by `playpen train reward`, another sequence classifier, or a callable scorer),
so its config holds only those keys, the sampling ones and TrainConfig's. A GRPO prompts config (prompts:,
reward_model:, group_size: ...) reads as one (grpo/tiny_reward_model).
"""
from __future__ import annotations

from dataclasses import dataclass

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen.train import learned_reward
from playpen.train.recipe import Recipe, Session, TrainConfig


@dataclass
class Config(TrainConfig):
    """Keys of TrainConfig, the prompts, the reward model and the sampling; `trainer:` takes trl.RLOOConfig keys."""

    prompts: str = documented("", help="jsonl of prompts ({\"prompt\": text or messages}); a file or a shipped one "
                                       "(reward/prompts/...)")
    reward_model: str = documented("", help="sequence classifier (registry name, folder) or callable scorer")
    reward_label: str | None = documented(None, help="the label of a multi-label reward_model to reward")
    group_size: int = bounded(8, ge=2, hint="RLOO's baseline is the mean reward of the other completions",
                              help="completions per prompt: TRL's num_generations")
    max_new_tokens: int = bounded(64, ge=1, help="max new tokens per completion")
    temperature: float = bounded(1.0, gt=0, hint="completions are sampled; 0 would make a prompt's completions "
                                                 "alike", help="sampling temperature of the completions")
    max_prompts: int | None = bounded(None, ge=1, help="use N prompts (shuffled with seed); null: all")


class RLOO(Recipe):
    name = "rloo"
    Config = Config
    trl_config = "RLOOConfig"

    def check(self, cfg: Config, where: str) -> None:
        if not cfg.prompts:
            raise PlaypenError(f"{where}: rloo learns from prompts: (a jsonl) against reward_model; games train "
                               f"with `playpen train grpo`")
        learned_reward.check_prompts(cfg, where)

    def trainer_defaults(self, cfg: Config) -> dict:
        # dropout off: completions are sampled in eval mode, so a training forward with dropout would score other
        # log-probabilities than the ones sampled (as GRPO's)
        return {"per_device_train_batch_size": cfg.group_size, "beta": 0.04, "learning_rate": 1e-5,
                "max_completion_length": cfg.max_new_tokens, "log_completions": False, "disable_dropout": True}

    def forced(self, cfg: Config) -> dict:
        # TRL rescales logits by its temperature when scoring: the sampling one. No sampler shuffle: the prompts
        # are shuffled with the run's seed, and TRL's sampler restarts its generator on resume.
        return {"num_generations": cfg.group_size, "temperature": cfg.temperature, "shuffle_dataset": False}

    def fit(self, session: Session):
        from trl import RLOOTrainer

        return learned_reward.fit_on_prompts(session, RLOOTrainer, limit=session.cfg.max_prompts)


RECIPE = RLOO()
