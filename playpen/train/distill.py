"""On-policy distillation in games: the learner plays, a teacher grades each of its turns.

    playpen train distill --config distill/tiny_wordle [key=value ...]

Each round (rounds.py, the loop iterative DPO and expert iteration share) the learner plays whole multi-turn
episodes of `instances` train instances with the rollout engine (the token sequences and env_mask GRPO trains on,
records under <run>/playpen-records tagged iter_KK), then trains `trainer.max_steps` steps on them:

- `teacher: programmatic` (DAgger): a built-in game's expert answers the exact history the learner saw at each of
  its turns, and that answer is the turn's target (cross-entropy on the expert's tokens, TRL's SFTTrainer), while
  the episode itself went on with the learner's reply. One row per learner turn; `agreement` is the share of
  turns on which the learner already made the expert's move.
- `teacher: <model>` (GKD / on-policy distillation): any local model sharing the learner's tokenizer, frozen. On
  the learner's own episodes, its token distributions at the learner's sampled positions are the target of TRL's
  `GKDTrainer.generalized_jsd_loss` with `beta` as in GKD (1: reverse KL, the on-policy distillation objective;
  0: forward KL; between: generalized JSD); one teacher forward per batch. metrics.jsonl gets `distill/loss_kl`
  (the divergence trained), `distill/reverse_kl_sampled` (log p_learner - log p_teacher on the sampled tokens)
  and `distill/agreement` (sampled token = the teacher's most likely token).

A round's rows are in <run>/targets/iter_KK.jsonl; a rerun resumes inside the round with the same rows. Not here:
distillation from a remote API model (it would need token log-probabilities the APIs do not give for our tokens)
and mixing the teacher's moves into play (DAgger's beta schedule): the learner plays every move.
"""
from __future__ import annotations

from dataclasses import dataclass

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen.models import service
from playpen.train import game_play, rounds, sequences
from playpen.train.rounds import ACROSS_ROUNDS_HELP, MAX_ROUNDS
from playpen.train.recipe import Session


@dataclass
class Config(game_play.GameConfig):
    """Keys of GameConfig and TrainConfig; `trainer:` takes trl.SFTConfig keys, max_steps per round."""

    teacher: str = documented(game_play.PROGRAMMATIC, help="who grades the learner's turns: programmatic (a "
                                                           "built-in game's expert, DAgger) or a local model with "
                                                           "the learner's tokenizer (GKD)")
    beta: float = bounded(1.0, ge=0, le=1, hint="GKD's beta: 1 reverse KL, 0 forward KL, between a JSD",
                          help="the divergence the learner's turns are trained on")
    rounds: int = bounded(3, ge=1, le=MAX_ROUNDS,
                          help="play → grade → train rounds, each from the model the last one ended with")
    group_size: int = bounded(1, ge=1, help="episodes per instance per round")
    schedule_across_rounds: bool = documented(False, help=ACROSS_ROUNDS_HELP)
    instances: int | None = bounded(32, ge=1, help="train instances played per round: the next ones of the split, "
                                                   "shuffled once with seed (null: all of them every round)")


class Distill(rounds.SFTRoundsRecipe):
    name = "distill"
    Config = Config
    rows_folder = "targets"

    def check(self, cfg: Config, where: str) -> None:
        game_play.check_game(cfg, where)
        if cfg.teacher == game_play.PROGRAMMATIC:
            from playpen.games.registry import resolve_game

            if not resolve_game(cfg.game).builtin:
                raise PlaypenError(f"{where}: teacher: programmatic is a built-in game's expert; {cfg.game} is not "
                                   f"built in: name a local model as the teacher")
            return
        check_model_teacher(cfg, where)

    def fit(self, session: Session):
        cfg = session.cfg
        self._instances = game_play.train_instances(cfg, session.run.path if session.is_main else None, limit=None)
        self._partner = game_play.load_partner(cfg)
        self._teacher = None if cfg.teacher == game_play.PROGRAMMATIC else load_model_teacher(cfg, session)
        return rounds.iterate(self, session)

    def collect(self, session: Session, k: int, model, offset: int) -> tuple[list[dict], dict]:
        cfg = session.cfg
        chosen = game_play.round_instances(self._instances, k, cfg.instances)
        episodes = game_play.play_round(session, k, model, chosen, self._partner, group_size=cfg.group_size)
        stats = game_play.episode_stats(episodes)
        rows = []
        if self._teacher is None:
            from playpen.rollout import LocalPolicy

            experts = sequences.ExpertTargets(cfg.game, LocalPolicy(model, session.tokenizer), seed=cfg.seed + k)
            agreed = 0
            for e in episodes:
                for trace in e.traces:
                    found, same = sequences.expert_rows(trace, experts, sequences.episode_meta(e))
                    rows += found
                    agreed += same
            stats["agreement"] = agreed / max(len(rows), 1)
        else:
            rows = [sequences.learner_row(t, sequences.episode_meta(e))
                    for e in episodes for t in e.traces if t.learner_turns]
        rows = rounds.gather(rows)
        return rows, {**rounds.merged_stats(stats, len(episodes)), "targets": len(rows)}

    def train_round(self, session: Session, rows: list[dict], args, resume, offset: int, model, peft_config):
        if self._teacher is None:
            return super().train_round(session, rows, args, resume, offset, model, peft_config)
        return rounds.train_rows(session, rows, args, resume, offset, model, peft_config,
                                 trainer_class=distillation_trainer(), teacher_model=self._teacher,
                                 beta=session.cfg.beta)


def check_model_teacher(cfg: Config, where: str) -> None:
    """A model teacher is a local Hugging Face model whose tokenizer is the learner's: its log-probabilities are
    read on the learner's own tokens."""
    from playpen.models import modeling

    spec = service.resolve(cfg.teacher, "teacher")
    if spec.get("backend") != "huggingface_local":
        raise PlaypenError(f"{where}: teacher {cfg.teacher} runs on {spec.get('backend')}; distillation reads the "
                           f"teacher's token probabilities, so it must be a local Hugging Face model (or "
                           f"teacher: programmatic)")
    learner = modeling.resolve_model_spec(cfg.model)
    if modeling.load_tokenizer(spec["huggingface_id"]).get_vocab() != \
            modeling.load_tokenizer(learner["huggingface_id"]).get_vocab():
        raise PlaypenError(f"{where}: teacher {cfg.teacher} has another tokenizer than the learner {cfg.model}; "
                           f"distillation compares their probabilities token by token: pick a teacher of the same "
                           f"model family")


def load_model_teacher(cfg: Config, session: Session):
    """The teacher's model, frozen (eval mode, no gradients), on the learner's device."""
    teacher = game_play.frozen_policy(service.resolve(cfg.teacher, "teacher")).model
    return teacher.to(next(session.model.parameters()).device)


def distillation_trainer():
    """TRL's SFTTrainer whose loss is GKD's generalized JSD to a frozen teacher on the labelled (learner-sampled)
    tokens, instead of cross-entropy. Built here so TRL loads only when training starts."""
    import torch
    from trl import SFTTrainer
    from trl.experimental.gkd import GKDTrainer
    from trl.trainer.utils import disable_dropout_in_model

    class DistillationTrainer(SFTTrainer):
        def __init__(self, *args, teacher_model, beta: float, **kwargs):
            super().__init__(*args, **kwargs)
            self.teacher_model, self.beta = teacher_model, beta
            # the learner's distribution is compared with the teacher's as sampled: no dropout noise in it
            disable_dropout_in_model(self.model)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            ids, mask = inputs["input_ids"], inputs["attention_mask"]
            labels = inputs["labels"][:, 1:]  # the token each position predicts
            outputs = model(input_ids=ids, attention_mask=mask)
            with torch.no_grad():
                teacher_logits = self.teacher_model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            student_logits = outputs.logits[:, :-1]
            loss = GKDTrainer.generalized_jsd_loss(student_logits, teacher_logits, labels=labels, beta=self.beta)
            with torch.no_grad():
                trained = labels != sequences.IGNORE
                target = labels.clamp(min=0).unsqueeze(-1)
                student_lp = torch.log_softmax(student_logits.float(), -1).gather(-1, target).squeeze(-1)
                teacher_lp = torch.log_softmax(teacher_logits.float(), -1).gather(-1, target).squeeze(-1)
                n = trained.sum().clamp(min=1)
                metrics = self._metrics["train" if model.training else "eval"]
                metrics["distill/loss_kl"].append(loss.item())
                metrics["distill/reverse_kl_sampled"].append(((student_lp - teacher_lp) * trained).sum().item()
                                                             / n.item())
                agree = (teacher_logits.argmax(-1) == labels) & trained
                metrics["distill/agreement"].append(agree.sum().item() / n.item())
            return (loss, outputs) if return_outputs else loss

    return DistillationTrainer


RECIPE = Distill()
