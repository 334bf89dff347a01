"""Reward models: TRL's RewardTrainer (Bradley-Terry loss on chosen vs rejected) on preference pairs.

    playpen train reward --config reward/tiny_sentiment [key=value ...]

The model is the configured base model loaded as a sequence classifier with one output (a new `score` head on
top of the LM; with LoRA the head is trained in full, `modules_to_save`). Pairs (`playpen.reward.preference_pairs`) come
from `data:` (a jsonl of chosen/rejected rows or of labelled texts) or `records:` (episodes of the same instance
in playpen-records: GRPO groups, DPO branches, evaluations). `held_out` of them are kept out of training; the
accuracy on them (chosen scored above rejected) is logged as eval_accuracy, written to
<run>/reward_eval.json and printed. Run layout, LoRA/QLoRA/DeepSpeed, resume and the registry entry are the
shared life cycle (runner.py): the entry (method: reward) is what GRPO's `reward_model:` and `playpen meter
--classifier` take by name. final/playpen_reward.json says whether the model scores conversations (pairs with a
prompt) or plain text, so scorers render inputs exactly as the model was trained on.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen.storage import atomic_write_json
from playpen.models import modeling
from playpen.train.recipe import Recipe, Session, TrainConfig

EVAL_FILE = "reward_eval.json"


@dataclass
class Config(TrainConfig):
    data: str | None = documented(None, help="jsonl: {chosen, rejected[, prompt]} rows or {text, label[, prompt]} "
                                             "rows")
    records: str | None = documented(None, help="or a playpen-records / clem results folder: pairs of episodes of "
                                                "the same instance")
    game: str | None = documented(None, help="records: only this game")
    held_out: float = bounded(0.1, ge=0, le=0.9, hint="the share of pairs kept out of training for the accuracy",
                              help="pairs kept out of training to measure the accuracy on")
    label_margin: float = bounded(0.0, ge=0, help="labelled texts: prefer a text only over ones lower by more than "
                                                  "this")
    pairs_per_text: int = bounded(1, ge=1, help="labelled texts: each text is chosen over up to N lower-labelled "
                                                "ones")
    max_pairs: int | None = bounded(None, ge=2, help="use N pairs (a seeded sample); null: all")


def _pairs(cfg: Config, where: str) -> list[dict]:
    from playpen.reward.preference_pairs import pairs_from_records, read_pairs_file

    if cfg.data:
        pairs = read_pairs_file(cfg.data, where, cfg.label_margin, cfg.pairs_per_text, cfg.seed)
    else:
        pairs = pairs_from_records(cfg.records, where, cfg.game)
    if cfg.max_pairs and len(pairs) > cfg.max_pairs:
        pairs = random.Random(cfg.seed).sample(pairs, cfg.max_pairs)
    return pairs


class Reward(Recipe):
    name = "reward"
    next_step = "reward_model: {name} in a GRPO config, or playpen meter MODEL --classifier {name}"
    finishes_from_checkpoint = False  # fit does (it measures the held-out accuracy too, and writes the score format)
    Config = Config
    trl_config = "RewardConfig"

    def check(self, cfg: Config, where: str) -> None:
        if bool(cfg.data) == bool(cfg.records):
            raise PlaypenError(f"{where}: set exactly one of data (a jsonl of pairs or labelled texts) or records "
                               f"(a playpen-records folder)")
        if cfg.game and not cfg.records:
            raise PlaypenError(f"{where}: game selects episodes from records; remove it or set records")
        if (modeling.resolve_model_spec(cfg.model).get("model_config") or {}).get("peft_model"):
            raise PlaypenError(f"{where}: model {cfg.model} is an adapter (peft_model); a reward model starts from "
                               f"full weights (its base model, or a merged model)")
        pairs = _pairs(cfg, where)
        if len(pairs) < 2:
            raise PlaypenError(f"{where}: {len(pairs)} preference pair(s); a reward model needs at least 2")

    def trainer_defaults(self, cfg: Config) -> dict:
        return {"max_length": 512, "learning_rate": 1e-4, "per_device_train_batch_size": 8,
                "per_device_eval_batch_size": 16}

    def load_model(self, session: Session, path: str, quantization: str | None, dtype, adapter: str | None):
        # one output: the reward. The `score` head is new (TRL's RewardTrainer loads models the same way).
        if quantization:  # TRL keeps QLoRA's trainable weights (the head too) in bf16: compute in bf16 to match
            import torch

            dtype = torch.bfloat16
        return modeling.load_model(path, quantization, dtype, peft_model=adapter, num_labels=1)

    def fit(self, session: Session):
        from datasets import Dataset
        from trl import RewardTrainer

        from playpen.reward.preference_pairs import pair_format, split_held_out
        from playpen.reward.scorers import FORMAT_FILE

        cfg, run = session.cfg, session.run
        pairs = _pairs(cfg, session.where)
        train, held_out = split_held_out(pairs, cfg.held_out, cfg.seed)
        peft_config = session.peft_config
        if peft_config is not None:
            peft_config.task_type = "SEQ_CLS"  # PEFT then trains the new head in full (modules_to_save)
        session.log(f"[playpen] {len(pairs)} preference pairs ({pair_format(pairs)}): {len(train)} to train on, "
                    f"{len(held_out)} held out")
        trainer = RewardTrainer(
            model=session.model, args=session.args, train_dataset=Dataset.from_list(train),
            eval_dataset=Dataset.from_list(held_out) if held_out else None, processing_class=session.tokenizer,
            peft_config=peft_config, callbacks=session.callbacks(resumed_step=session.state["step"]))
        if session.resume is not None and 0 < self.planned_steps(cfg) <= session.state["global_step"]:
            # killed after its last checkpoint: resuming would train one step past max_steps; load it instead
            from transformers import TrainerState

            trainer._load_from_checkpoint(str(session.resume))
            trainer.state = TrainerState.load_from_json(str(session.resume / "trainer_state.json"))
            session.log(f"[playpen] {session.resume} is the last step ({session.state['global_step']}); finishing "
                        f"{run.path} from it, nothing trained")
        else:
            trainer.train(resume_from_checkpoint=str(session.resume) if session.resume else None)
        result = {"pairs": len(pairs), "train_pairs": len(train), "held_out_pairs": len(held_out),
                  "format": pair_format(pairs)}
        if held_out:
            metrics = trainer.evaluate()
            result.update(accuracy=metrics.get("eval_accuracy"), margin=metrics.get("eval_margin"),
                          loss=metrics.get("eval_loss"))
        if session.is_main:
            atomic_write_json(run.path / EVAL_FILE, result)
            session.final_files[FORMAT_FILE] = {"format": result["format"], "num_labels": 1}  # saved with the model
            if held_out:
                print(f"[playpen] reward model: held-out accuracy {result['accuracy']:.3f} on {len(held_out)} pairs "
                      f"(mean margin {result['margin']:.3f}; {run.path / EVAL_FILE})", flush=True)
        return trainer


RECIPE = Reward()
