"""What the game methods share about playing games: config keys, checks, the partner, a round of play, episode
statistics.

The trainers only call `playpen.rollout` (RolloutEngine, LocalPolicy, load_instances, preference_pairs); the
rollout package knows nothing of TRL.
"""
from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen.games.instances import generate_instances, instances_file, load_instances, pick_generated
from playpen.storage import remove_tree
from playpen import distributed
from playpen.models import service
from playpen.train.recipe import Session, TrainConfig


PROGRAMMATIC = "programmatic"  # partner (or distill's teacher): the built-in game's own expert


def frozen_policy(spec: dict):
    """A local Hugging Face model (spec of backend huggingface_local) as a frozen LocalPolicy: eval mode, no
    gradients, its own quantization and adapter; bfloat16 on GPUs, float32 on CPU (game partners, distill's
    teacher). The model service loads it, the rollout layer wraps it."""
    from playpen.rollout import LocalPolicy

    return LocalPolicy(*service.load_frozen(spec), name=spec["model_name"])


@dataclass
class GameConfig(TrainConfig):
    """Keys of the methods that learn from game play."""

    game: str | None = documented(None, help="built-in or registered game (`playpen list games`)")
    split: str = documented("train", help="instances to learn from: train, or an instances file of the game (a "
                                          "name in its in/ folder or a path); validation is held out")
    generate: dict | None = documented(None, help="{seed: N, <generator args>}: fresh instances from the game's own "
                                                  "instancegenerator.py instead of split (validation duplicates "
                                                  "dropped)")
    instances: int | None = bounded(None, ge=1, help="use N instances (shuffled with seed); null: all of the split")
    group_size: int = bounded(8, ge=1, help="episodes per instance (GRPO group / DPO branching pool)")
    partner: str | None = documented(None, help="frozen player of the other seats (registry name: local HF or "
                                                "remote API + key.json; programmatic: a built-in game's own "
                                                "expert); was teacher:, still read as partner where a method has no "
                                                "teacher")
    partner_seats: list[int] | None = documented(None, help="the seats the partner holds (default: all but the "
                                                            "first); the learner holds the rest, e.g. debate [2]: a "
                                                            "model judge, the learner in both debater seats (was "
                                                            "teacher_seats)")
    self_play: bool = documented(True, help="without a partner the learner plays every role")
    train_seats: str = documented("all", help="self-play: all = episodes of a group alternate which learner seat "
                                              "is trained (every role learns); first = the first seat only")
    max_new_tokens: int = bounded(64, ge=1, help="max new tokens per learner turn")
    temperature: float = bounded(1.0, gt=0, hint="episodes are sampled; 0 would play every group's episodes alike",
                                 help="sampling temperature of the learner: the episodes of a group must be able "
                                      "to differ")
    rollout_batch_size: int = bounded(64, ge=1, help="sequences generated together")
    use_vllm: bool = documented(False, help="play the learner's turns with vLLM (the weights follow every optimizer "
                                            "step or round); false: playpen's own batched Hugging Face loop "
                                            "(docs/rollouts.md)")
    vllm_mode: str = documented("colocate", help="use_vllm: colocate = vLLM in the trainer's process; server = a "
                                                 "vLLM server, which a --nodes N job starts on its first node "
                                                 "(training on the others), or vllm_server_base_url")
    vllm_server_base_url: str | None = documented(None, help="vllm_mode server: the URL of a server you started "
                                                             "(python -m playpen.models.vllm_server); null: the "
                                                             "job's own")
    vllm_server_port: int = bounded(0, ge=0, le=65535, help="vllm_mode server, the job's own server: its port "
                                                            "(0: a free one)")
    vllm_server_timeout: float = bounded(240.0, gt=0, help="vllm_mode server: seconds to wait for the server to "
                                                           "answer before failing")
    vllm_gpu_memory_utilization: float = bounded(0.3, gt=0, le=1, help="use_vllm on a GPU: the share of its memory "
                                                                       "vLLM takes (weights and KV cache); on CPU "
                                                                       "VLLM_CPU_KVCACHE_SPACE (GiB) sizes the cache")
    validation_instances: int = bounded(0, ge=0, help="above 0: play N validation instances at the start, every "
                                                      "validation_every steps, and at the end")
    validation_every: int = bounded(0, ge=0, help="steps between validations (0: start and end only)")
    validation_temperature: float = bounded(0.0, ge=0, help="greedy by default, as clemscore evaluation plays")
    best_of_n: dict | int | None = documented(None, help="debate, consultancy, double_consultancy: advocates that "
                                                         "sample n speeches per turn and give the chooser's "
                                                         "favourite, in every experiment played ({n, chooser, "
                                                         "temperature, seats}; playpen/games/debate/best_of_n.py)")


def check_game(cfg: GameConfig, where: str) -> dict:
    """The game exists, has instances, and has a player for every role; the partner's key is present."""
    from playpen.games.registry import resolve_game

    if cfg.use_vllm:
        check_vllm(cfg, where)

    if not cfg.game:
        raise PlaypenError(f"{where}: game is required (e.g. game: wordle; see `playpen list games`)")
    entry = resolve_game(cfg.game)
    players = entry.players
    if players > 1 and not cfg.partner and not cfg.self_play:
        roles = ", ".join(entry.spec.get("roles", [])) or f"{players} roles"
        raise PlaypenError(f"{where}: game {cfg.game} has {players} players ({roles}) and self_play is off: "
                           f"it needs a partner (partner=<model>, see `playpen list models`)")
    if cfg.train_seats not in ("all", "first"):
        raise PlaypenError(f"{where}: train_seats must be 'all' or 'first', got {cfg.train_seats!r}")
    if cfg.partner and players == 1:
        raise PlaypenError(f"{where}: game {cfg.game} has a single player; a partner has no role in it "
                           f"(remove partner)")
    if cfg.partner_seats is not None:
        if not cfg.partner:
            raise PlaypenError(f"{where}: partner_seats {cfg.partner_seats} needs a partner (partner=<model>)")
        if not set(cfg.partner_seats) < set(range(players)) or not all(type(i) is int for i in cfg.partner_seats):
            raise PlaypenError(f"{where}: partner_seats must be seat numbers of {cfg.game} (0..{players - 1}), "
                               f"leaving the learner at least one; got {cfg.partner_seats}")
    if cfg.partner == PROGRAMMATIC:
        if not entry.builtin:
            raise PlaypenError(f"{where}: partner: programmatic plays the built-in games' experts; {cfg.game} "
                               f"comes from {entry.source}: name a model as its partner")
    elif cfg.partner:
        service.resolve(cfg.partner, "partner")  # unknown name or missing key.json entry: one line, now
    if cfg.best_of_n is not None:
        from playpen.games.debate.best_of_n import GAMES, BestOfN

        if entry.name.removeprefix("playpen-") not in GAMES:
            raise PlaypenError(f"{where}: best_of_n is for the advocates of {', '.join(GAMES)}; {cfg.game} has none "
                               f"(remove best_of_n)")
        try:
            BestOfN.from_setting(cfg.best_of_n)
        except ValueError as e:
            raise PlaypenError(f"{where}: {e}") from None
    if cfg.generate is not None and not isinstance(cfg.generate.get("seed"), int):
        raise PlaypenError(f"{where}: generate needs an integer seed, e.g. generate: {{seed: 7}}")
    train_instances(cfg)  # the instances file exists and parses, or the generator runs: before anything is written
    if cfg.generate is None and instances_file(entry, cfg.split) == instances_file(entry, "validation"):
        print(f"[playpen] note: split {cfg.split} is {cfg.game}'s validation set: held-out scores will be on "
              f"instances the model trained on")
    return entry.spec


def load_partner(cfg: GameConfig):
    """LocalPolicy for a local Hugging Face partner (frozen, eval mode); a clemcore Model for remote ones and the
    built-in games' experts (partner: programmatic)."""
    if cfg.partner == PROGRAMMATIC:
        from playpen.games import expert_model

        return expert_model(seed=cfg.seed)
    if not cfg.partner:
        return None
    spec = service.resolve(cfg.partner, "partner")
    if spec.get("backend") == "huggingface_local":
        return frozen_policy(spec)
    return service.load_player(spec, cfg.max_new_tokens, 0.0)


@contextmanager
def model_for_play(trainer):
    """The model a TRL trainer is training, ready for the rollout engine. Under DeepSpeed or FSDP through TRL's
    unwrap context (ZeRO-3 gathers the parameters); otherwise the trainer's own unwrapped module: TRL's context
    would toggle gradient checkpointing and look packages up on every rollout (about 1 % of a GRPO step on
    playpen-tiny), while the engine generates in eval mode, where checkpointing is off anyway."""
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        from trl.models import unwrap_model_for_generation

        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=trainer.args.ds3_gather_for_generation) as model:
            yield model
    else:
        yield trainer.model


def select_instances(cfg: GameConfig, split: str, limit: int | None):
    instances = load_instances(cfg.game, split=split, limit=limit, seed=cfg.seed)
    if not instances:
        raise PlaypenError(f"game {cfg.game} has no {split} instances")
    return instances


KEEP = object()  # train_instances' default limit: cfg.instances


def train_instances(cfg: GameConfig, save_dir: Path | None = None, limit=KEEP):
    """The instances to learn from, shuffled with the seed and cut at `limit` (default: cfg.instances; None: all):
    the split's file, or fresh ones from the game's generator (`generate:`), then saved as
    <save_dir>/<game>.generated-seed<N>.json so the run says what it trained on."""
    limit = cfg.instances if limit is KEEP else limit
    if cfg.generate is None:
        return with_best_of_n(cfg, select_instances(cfg, cfg.split, limit))
    args = {k: v for k, v in cfg.generate.items() if k != "seed"}
    instances, dropped = generate_instances(cfg.game, cfg.generate["seed"], args)
    pairs = pick_generated(cfg.game, instances, cfg.generate["seed"], limit, cfg.seed)
    if save_dir is not None:
        from playpen.storage import atomic_write_json

        atomic_write_json(save_dir / f"{cfg.game}.generated-seed{cfg.generate['seed']}.json", instances)
        print(f"[playpen] {cfg.game}: {len(pairs)} generated instances (seed {cfg.generate['seed']}; {dropped} "
              f"identical to validation instances dropped)", flush=True)
    return with_best_of_n(cfg, pairs)


def with_best_of_n(cfg: GameConfig, pairs: list) -> list:
    """The instances with the config's best-of-n advocates in their experiments."""
    if cfg.best_of_n is None:
        return pairs
    return [({**experiment, "best_of_n": cfg.best_of_n}, instance) for experiment, instance in pairs]


def round_instances(instances: list, k: int, n: int | None) -> list:
    """The instances round k plays: the next n of the (already shuffled) list, wrapping around; all when n is
    None."""
    if not n or n >= len(instances):
        return list(instances)
    start = (k * n) % len(instances)
    return [instances[(start + i) % len(instances)] for i in range(n)]


def check_vllm(cfg: GameConfig, where: str) -> None:
    """use_vllm with what it cannot honour, and a vLLM that is missing or does not load: one line each, now."""
    from playpen.models.vllm_engine import require_vllm

    if cfg.quantization:
        raise PlaypenError(f"{where}: use_vllm with quantization {cfg.quantization}: vLLM samples from merged "
                           f"full-precision weights, so a 4/8-bit model cannot be synced into it; set use_vllm: false "
                           f"or quantization: null")
    if cfg.vllm_mode not in ("colocate", "server"):
        raise PlaypenError(f"{where}: vllm_mode must be colocate or server, got {cfg.vllm_mode!r}")
    if cfg.vllm_server_base_url is not None and not re.fullmatch(r"https?://[\w.\-]+(:\d+)?/?",
                                                                  cfg.vllm_server_base_url):
        raise PlaypenError(f"{where}: vllm_server_base_url must be http(s)://HOST[:PORT], got "
                           f"{cfg.vllm_server_base_url!r}")
    require_vllm(f"{where}: use_vllm")


def with_vllm(session: Session, policy, step: int, seed: int, accelerator=None):
    """use_vllm: `policy` answered by the session's colocated vLLM engine (started on first use), holding the
    policy's current weights (TRL's sync, when `step` moved on since the last one). Otherwise `policy` as it is."""
    cfg = session.cfg
    if not cfg.use_vllm:
        return policy
    from playpen.models.vllm_engine import connect_server, start_colocated
    from playpen.models.vllm_server import STATE_ENV
    from playpen.rollout.vllm_backend import ServedGenerator, VLLMGenerator

    if session.vllm is None and cfg.vllm_mode == "server":
        session.vllm = connect_server(policy.model, session.tokenizer, accelerator=accelerator,
                                      base_url=cfg.vllm_server_base_url, state_file=os.environ.get(STATE_ENV),
                                      timeout_s=cfg.vllm_server_timeout,
                                      weights_dir=str(session.run.path / "vllm-weights"),
                                      root=str(session.run.path))
    elif session.vllm is None:
        session.vllm = start_colocated(policy.model, session.tokenizer, accelerator=accelerator,
                                       dtype="bfloat16" if session.autocast_bf16() else "float32",
                                       max_model_len=min(policy.max_positions or 2048, 4096),
                                       memory_fraction=cfg.vllm_gpu_memory_utilization, seed=cfg.seed)
    if session.vllm_synced != step:  # stale weights are the silent failure: sync on every new step or round
        session.vllm.model = policy.model
        session.vllm.sync_weights()
        session.vllm_synced = step
    policy.vllm = ServedGenerator(session.vllm) if cfg.vllm_mode == "server" \
        else VLLMGenerator(session.vllm.llm, seed)
    return policy


def play_round(session: Session, k: int, model, instances: list, partner, group_size: int):
    """Round k's episodes of this process's share of `instances` (records tagged iter_k), seeded by (seed, k)."""
    from playpen.rollout import LocalPolicy, RolloutEngine

    cfg = session.cfg
    shard = instances[session.rank::session.world_size]
    policy = LocalPolicy(model, session.tokenizer, name=session.spec["model_name"].replace("/", "_"))
    seed = (cfg.seed * 1_000_003 + k) * 1_009 + session.rank
    policy = with_vllm(session, policy, k, seed)
    engine = RolloutEngine(learner=policy, partner=partner, max_new_tokens=cfg.max_new_tokens,
                           temperature=cfg.temperature, batch_size=cfg.rollout_batch_size, seed=seed,
                           partner_seats=cfg.partner_seats)
    tag = records_tag("iter", k, session.rank, session.world_size)
    clear_records(session.run.records, lambda prefix, step: prefix == "iter" and step == k)
    episodes = engine.play(cfg.game, instances=shard, group_size=group_size, records_dir=session.run.records,
                           records_tag=tag)
    if failure := partner_failure(cfg, episodes, f"of round {k}"):
        raise PlaypenError(f"{failure} (records: {session.run.records})")
    return episodes


def main_score(episode) -> float:
    """The episode's main score 0-100; aborted (NaN) and missing count as 0 in training statistics."""
    value = episode.main_score
    return 0.0 if math.isnan(value) else value


def episode_stats(episodes) -> dict:
    """Means over episodes: reward, episode_score, aborted_pct, success_rate, turns."""
    n = max(len(episodes), 1)
    return {
        "reward": sum(e.reward for e in episodes) / n,
        "episode_score": sum(main_score(e) for e in episodes) / n,
        "aborted_pct": 100.0 * sum(bool(e.aborted) for e in episodes) / n,
        "success_rate": sum(bool(e.success) for e in episodes) / n,
        "turns": sum(e.num_turns for e in episodes) / n,
    }


# An episode whose partner raised (API down, key rejected, ...) ends aborted with this error (RolloutEngine).
PARTNER_FAILED = "partner failed"
# More than this share of one rollout's episodes broken by the teacher stops training: they all score -1, so the
# learner would be trained (and registered) on the partner's outage, not on the game. A few failures pass.
PARTNER_FAILURE_LIMIT = 0.5


def partner_failure(cfg: GameConfig, episodes, when: str) -> str | None:
    """Why training must stop because the partner failed in too many of `episodes`, else None. Counted over all
    processes (each plays its own share), so every rank stops together."""
    if not cfg.partner:  # self-play: the learner is every partner
        return None
    failed = [e.error for e in episodes if (e.error or "").startswith(PARTNER_FAILED)]
    parts = distributed.all_gather((len(failed), len(episodes), failed[0] if failed else None))
    n_failed, total = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if n_failed <= PARTNER_FAILURE_LIMIT * total:
        return None
    first = " ".join(next(p[2] for p in parts if p[2]).split())
    return (f"partner {cfg.partner} failed in {n_failed} of {total} episodes {when} ({first[:200]}); stopped "
            f"before training on them: check that its service is up and its key.json entry is valid")


def records_tag(prefix: str, step: int, rank: int, world: int) -> str:
    return f"{prefix}_{step:05d}" + (f"-rank{rank}" if world > 1 else "")


def play_validation(policy, cfg: GameConfig, instances, partner, records_dir: Path, tag: str) -> dict:
    from playpen.rollout import RolloutEngine

    engine = RolloutEngine(learner=policy, partner=partner, max_new_tokens=cfg.max_new_tokens,
                           temperature=cfg.validation_temperature, batch_size=cfg.rollout_batch_size,
                           partner_seats=cfg.partner_seats)
    episodes = engine.play(cfg.game, instances=instances, group_size=1, records_dir=records_dir, records_tag=tag)
    return episode_stats(episodes)


TAG = re.compile(r"^(?P<prefix>[a-z]+)_(?P<step>\d+)(?:-rank\d+)?$")


def clear_records(records_dir: Path, drop) -> list[Path]:
    """Delete tag folders <records>/<models>/<prefix>_<step>[-rankR] for which drop(prefix, step) is true: the
    records of steps that are replayed after a resume are written again, never twice."""
    removed = []
    if not records_dir.is_dir():
        return removed
    for models_dir in records_dir.iterdir():
        if not models_dir.is_dir():
            continue
        for tag_dir in models_dir.iterdir():
            match = TAG.match(tag_dir.name)
            if tag_dir.is_dir() and match and drop(match["prefix"], int(match["step"])):
                remove_tree(tag_dir, records_dir)
                removed.append(tag_dir)
    return removed
