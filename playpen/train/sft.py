"""SFT: supervised fine-tuning on game transcripts, full weights or LoRA/QLoRA, loss on assistant turns only.

    playpen train sft --config sft/tiny_lora [key=value ...]

Data: a jsonl file made by `playpen data RESULTS_DIR -o sft.jsonl` (rows {"messages": [...], "meta": {...}}), or
`expert:GAME`: a built-in game's expert transcripts, each train instance once, played when the run starts (the
same rows `playpen data --expert GAME` writes; nothing to prepare).
The chat template marks assistant tokens ({% generation %}; TRL swaps in a marked copy of known templates), so
only what the player said is learned, never the game master's prompts.
"""
from __future__ import annotations

from dataclasses import dataclass

from playpen.config import bounded, documented
from playpen import dataset_from_records, training_data
from playpen.train.recipe import Recipe, Session, TrainConfig


@dataclass
class Config(TrainConfig):
    data: str = documented("", help='jsonl with {"messages": [...]} rows (from `playpen data`), or expert:GAME: '
                                    "that built-in game's expert transcripts of its train split")
    eval_data: str | None = documented(None, help="optional jsonl in the same format (or expert:GAME), evaluated "
                                                  "every trainer.eval_steps")
    max_rows: int | None = bounded(None, ge=1, help="use only the first N rows")


def _row_problem(row: dict) -> str | None:
    return training_data.check_messages(row.get("messages"))


def _rows(data: str, where: str, key: str, limit: int | None) -> list[dict]:
    """The rows of a jsonl file, or of `expert:GAME` (played here, deterministic), each checked."""
    from playpen.errors import PlaypenError

    if not data:
        raise PlaypenError(f"{where}: {key} is required: a jsonl file (`playpen data`), or expert:GAME for a "
                           f"built-in game's expert transcripts (e.g. {key}=expert:wordle)")
    game = dataset_from_records.expert_game(data)
    if game is None:
        return training_data.read_jsonl_rows(data, where, key, _row_problem, limit)

    try:
        rows = dataset_from_records.expert_rows(game)[:limit]
    except PlaypenError as e:
        raise PlaypenError(f"{where}: {key}: {e}") from None
    return rows


def _dataset(data: str, where: str, key: str, limit: int | None):
    from datasets import Dataset

    return Dataset.from_list([{"messages": r["messages"]} for r in _rows(data, where, key, limit)])


class SFT(Recipe):
    name = "sft"
    Config = Config
    trl_config = "SFTConfig"

    def check(self, cfg: Config, where: str) -> None:
        _rows(cfg.data, where, "data", cfg.max_rows)
        if cfg.eval_data:
            _rows(cfg.eval_data, where, "eval_data", None)

    def trainer_defaults(self, cfg: Config) -> dict:
        return {"assistant_only_loss": True, "max_length": 1024, "packing": False,
                "eval_strategy": "steps" if cfg.eval_data else "no"}

    def fit(self, session: Session):
        from trl import SFTTrainer

        cfg = session.cfg
        trainer = SFTTrainer(
            model=session.model,
            args=session.args,
            train_dataset=_dataset(cfg.data, session.where, "data", cfg.max_rows),
            eval_dataset=_dataset(cfg.eval_data, session.where, "eval_data", None) if cfg.eval_data else None,
            processing_class=session.tokenizer,
            peft_config=session.peft_config,
            callbacks=session.callbacks(resumed_step=session.state["step"]),
        )
        trainer.train(resume_from_checkpoint=str(session.resume) if session.resume else None)
        return trainer


RECIPE = SFT()
