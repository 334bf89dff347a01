"""RLOO against a learned reward on prompts: TRL's RLOOTrainer (REINFORCE with a leave-one-out baseline: each
completion is compared with the mean reward of the other completions of its prompt), `trainer.beta` for the KL
to the reference model, as RewardLM and trlX do it with PPO (which TRL 1.16 no longer has).

    playpen train rloo --config grpo/tiny_reward_model     # the same keys as GRPO with prompts:

Games stay GRPO's: their multi-turn episodes need GRPOTrainer's rollout_func. RLOO takes a prompts jsonl and a
reward_model (a classifier trained by `playpen train reward`, another sequence classifier, or a callable scorer).
"""
from __future__ import annotations

from playpen.errors import PlaypenError
from playpen.train import learned_reward
from playpen.train.grpo import GRPO
from playpen.train.recipe import Session


class RLOO(GRPO):
    name = "rloo"
    trl_config = "RLOOConfig"

    def check(self, cfg, where: str) -> None:
        if not cfg.prompts or cfg.game:
            raise PlaypenError(f"{where}: rloo learns from prompts: (a jsonl) against reward_model; games train "
                               f"with `playpen train grpo`")
        learned_reward.check(cfg, where)

    def fit(self, session: Session):
        from trl import RLOOTrainer

        return learned_reward.fit_on_prompts(session, RLOOTrainer)


RECIPE = RLOO()
