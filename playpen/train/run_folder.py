"""A run folder's policy: which folder a run trains into (its id), the lock rank 0 holds on it while it trains,
and what is written into it before training starts (resolved config, cut-off checkpoints removed). Which reruns
are complete or allowed is `reruns.py`'s.
"""
from __future__ import annotations

import hashlib
from contextlib import contextmanager

from playpen.config import dump_yaml, read_text, to_dict
from playpen.errors import PlaypenError
from playpen.storage import atomic_write_text, exclusive_folder
from playpen.train.checkpoints import remove_incomplete, truncate_jsonl
from playpen.train.recipe import Session
from playpen.train.reruns import finished_run


def run_id_of(method: str, cfg) -> str:
    """A run's identity: `run_id=` when given, else the method and a hash of the resolved config, so the same
    command (here, in a job, after a requeue, in `make demo`'s evaluation) always finds the same run folder."""
    return cfg.run_id or default_run_id(method, cfg)


def default_run_id(method: str, cfg) -> str:
    data = to_dict(cfg)
    for key in ("run_id", "storage_root", "allow_config_change"):  # (cpu_threads stays: existing ids keep)
        data.pop(key, None)
    digest = hashlib.sha1(f"{method}\n{dump_yaml(data)}".encode()).hexdigest()[:8]
    return f"{method}-{digest}"


@contextmanager
def hold_run_dir(session: Session):
    """Rank 0 holds the run dir while it trains, so a second `playpen train` of the same run stops in one line (the
    other ranks of this job are this training, not a second one). The checks in `run` read the run dir without the
    lock, before the model loaded: if another training of it moved on meanwhile, its newer checkpoints must not be
    taken for cut-off ones and deleted, so the run dir is read again under the lock."""
    if not session.is_main:
        yield
        return
    run = session.run
    with exclusive_folder(run.path, f"run folder {run.path} is in use by another playpen train",
                          "wait for it to end, or pass run_id=<new id> to start a separate run"):
        if session.recipe.find_resume(session.cfg, run) != (session.resume, session.state["global_step"]) \
                or finished_run(session.recipe, session.cfg, run):
            raise PlaypenError(f"run {run.path} changed while the model loaded (another playpen train of it "
                               f"ended?); run the same command again to continue from where it is now")
        yield


def prepare_run_dir(session: Session) -> None:
    run, resume = session.run, session.resume
    if session.is_main:
        run.create()
        resolved = {**to_dict(session.cfg), "run_id": run.path.name}
        resolved.pop("allow_config_change")  # a permission for this rerun, not part of what the run learns
        text = f"# playpen train {session.recipe.name} (resolved config)\n{dump_yaml(resolved)}"
        if session.config_changes:
            kept = run.path / f"config.before-step{session.state['global_step']}.yaml"
            atomic_write_text(kept, read_text(run.config, "run config"))
            print(f"[playpen] allow_config_change: continuing {run.path} at step {session.state['global_step']} with "
                  f"new {', '.join(session.config_changes)} (the old config is kept as {kept.name})")
        atomic_write_text(run.config, text)
        truncate_jsonl(run.metrics, session.state["global_step"])
        remove_incomplete(run.checkpoints, resume)
        if resume:
            print(f"[playpen] resuming {run.path} from {resume.name}")
        else:
            print(f"[playpen] training {session.recipe.name} into {run.path}")
    session.barrier()
