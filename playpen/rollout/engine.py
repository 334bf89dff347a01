"""The rollout engine: many clemcore episodes at once, one batched forward per turn across all of them.

    engine = RolloutEngine(learner=LocalPolicy(model, tokenizer), partner=None, max_new_tokens=64,
                           temperature=1.0, batch_size=32)
    episodes = engine.play("wordle", load_instances("wordle", "train", limit=16), group_size=8,
                           records_dir=run.records, records_tag="step_00012")

Game logic is clemcore's own: each episode is a real GameMaster (`create_game_master`, `setup(**instance)`,
`before_game()`, then `step(response)` until done), recorded by clemcore's GameInteractionsRecorder and scored
by the game's own GameScorer, so scores equal `clem score`'s.

Scheduling (continuous batching): up to `batch_size` episodes are live. Each loop lets programmatic and clemcore
players answer (clemcore's `Player.batch_response`), then runs one generation wave per local policy over every
live episode waiting for it. An episode that ends frees its slot at once; the next pending episode joins the
next wave. Learner seats keep their token sequence and KV cache between turns (see generation.py), so a turn
only encodes the new environment message. Records are written by a background thread.

Candidates (best-of-N players): a player whose `candidates_per_turn` is above 1 gets that many replies sampled in
the wave (at its `candidate_temperature`, from one shared prompt encoding), and its `choose(replies)` says which
one it gives; the trace keeps the chosen reply's tokens. Such players of other models answer on their own
(`player(context)`), never in clemcore's model batches, which do not ask the player.

Self-play (partner=None): the learner holds every seat. With a partner: the partner holds `partner_seats`
(default: every seat but `learner_seat`, 0 by default, the game's first player) and the learner the others, e.g.
debate's judge as the partner (partner_seats=[2]) before the learner debating itself. A partner may be a
LocalPolicy, any clemcore `backends.Model`, a registered model name, or "programmatic" (the game's own scripted
players).
"""
from __future__ import annotations

import copy
import functools
import logging
import random
import sys
import uuid
from collections import deque
from datetime import datetime
from pathlib import Path

import torch
from clemcore import backends
from clemcore.clemgame import GameInteractionsRecorder, Player
from clemcore.clemgame import recorder as clemcore_recorder

from playpen.errors import PlaypenError
from playpen.rollout.episode import (GAME_ENDED_CONTEXT, BranchInfo, Conversation, Episode, idle_trace,
                                     reward_from)
from playpen.rollout.generation import generate_groups
from playpen.games.instances import game_entry, load_benchmark, normalize
from playpen.records import EpisodeRecord, RecordWriter, model_identifier, preferred_name
from playpen.rollout.live import ClaimedFolders, Job, LiveEpisode, PlaySession, Snapshot
from playpen.rollout.policy import LocalPolicy, PolicyModel, clean_reply, partner_model

# clemcore's recorder reads clemcore's version from the package metadata for every episode (~1 ms, 2 % of a
# playpen-tiny GRPO step); the version cannot change while we run.
clemcore_recorder.get_version = functools.cache(clemcore_recorder.get_version)

log = logging.getLogger(__name__)


def candidates(player) -> int:
    """Replies sampled for this player per turn (best-of-N players ask for several)."""
    return max(int(getattr(player, "candidates_per_turn", 1) or 1), 1)


class RolloutEngine:
    def __init__(self, learner: LocalPolicy, partner=None, *, max_new_tokens: int = 64, temperature: float = 1.0,
                 batch_size: int = 32, progress: bool = True, kv_cache: bool = True, seed: int | None = None,
                 learner_seat: int = 0, partner_temperature: float | None = None,
                 partner_seats: list[int] | None = None, teacher=None, teacher_seats: list[int] | None = None,
                 teacher_temperature: float | None = None):
        # teacher, teacher_seats, teacher_temperature: the names before distillation's grading teacher came
        partner = teacher if partner is None else partner
        partner_seats = teacher_seats if partner_seats is None else partner_seats
        partner_temperature = teacher_temperature if partner_temperature is None else partner_temperature
        if not isinstance(learner, LocalPolicy):
            raise PlaypenError(f"learner must be a LocalPolicy (got {type(learner).__name__})")
        if max_new_tokens < 1 or batch_size < 1 or temperature < 0:
            raise PlaypenError("max_new_tokens and batch_size must be >= 1 and temperature >= 0 "
                               f"(got {max_new_tokens}, {batch_size}, {temperature})")
        self.learner = learner
        self.max_new_tokens, self.temperature, self.batch_size = int(max_new_tokens), float(temperature), batch_size
        self.progress, self.kv_cache, self.learner_seat = progress, kv_cache, learner_seat
        self.partner_seats = None if partner_seats is None else sorted(set(partner_seats))
        self.partner_temperature = self.temperature if partner_temperature is None else float(partner_temperature)
        self.partner = partner_model(partner, self.max_new_tokens, self.partner_temperature)
        self._rng = random.Random(seed)
        self._seed = seed
        self._generators: dict[int, torch.Generator] = {}  # per policy, on its device; kept across plays
        self._open_writers: list[RecordWriter] = []

    # ------------------------------------------------------------ public API

    def play(self, game, instances, group_size: int = 1, records_dir=None, records_tag: str | None = None,
             wait_for_records: bool = True, clem_files: bool = False) -> list[Episode]:
        """Play every instance `group_size` times. Episodes come back in input order (instance-major).
        wait_for_records=False returns while records are still being written (a trainer overlaps that with its
        step); `finish_records()` waits for them and sets each episode's record_path. `clem_files`: the records
        also get the files `clem run` writes through clemcore's own savers (`<models>/run.json`, each episode's
        completed.json or error.json and player_N.requests.json); clemcore writes those by name, so
        `records_dir` must be a private folder (eval's staging folder), and each instance is played once."""
        if group_size < 1:
            raise PlaypenError(f"group_size must be >= 1 (got {group_size})")
        if clem_files and (records_dir is None or records_tag or group_size != 1):
            raise PlaypenError("clem_files records one episode per instance, in clem's layout: give records_dir, "
                               "no records_tag, group_size 1")
        session = self._session(game, records_dir, records_tag, clem_files)
        jobs = [Job(e, i, g) for e, i in normalize(instances) for g in range(group_size)]
        try:
            return self._run(session, jobs, total=len(jobs))
        finally:
            self._close(session, wait=wait_for_records or clem_files or sys.exc_info()[0] is not None)

    def finish_records(self) -> list:
        """Wait for the records of plays that did not wait for them; the paths written."""
        written = []
        while self._open_writers:
            written += self._open_writers.pop(0).close()
        return written

    def branch(self, game, instances, branch_factor: int = 2, branch_turn: int | None = None,
               records_dir=None, records_tag: str | None = None) -> list[Episode]:
        """Play each instance once, then replay it `branch_factor - 1` more times from just before one learner
        reply (the traced seat's `branch_turn`-th reply, or a uniformly drawn one when None): all branches of a
        root share the game state and conversation up to that reply and diverge from it on. Returns roots and
        branches; see `preference_pairs`. Sampling must be stochastic (temperature > 0) for branches to differ."""
        if branch_factor < 2:
            raise PlaypenError(f"branch_factor must be >= 2 (got {branch_factor})")
        session = self._session(game, records_dir, records_tag)
        session.snapshot_turn = "all" if branch_turn is None else int(branch_turn)
        roots_in = [Job(e, i) for e, i in normalize(instances)]
        try:
            roots = self._run(session, roots_in, total=len(roots_in) * branch_factor)
            jobs = []
            for index, (root, job) in enumerate(zip(roots, roots_in)):
                snaps = session.snapshots.pop(index, [])
                if branch_turn is None:
                    snap = snaps[self._rng.randrange(len(snaps))] if snaps else None
                else:
                    snap = next((s for s in snaps if s.turn == branch_turn), None)
                if snap is None:
                    continue  # the traced seat never replied (or not that often): nothing to branch
                root.branch = BranchInfo(root.uid, snap.turn, 0)
                jobs += [Job(job.experiment, job.instance, 0, BranchInfo(root.uid, snap.turn, b), snap)
                         for b in range(1, branch_factor)]
            session.snapshot_turn = None
            session.snapshots.clear()
            if session.progress is not None:
                session.progress.total = len(roots) + len(jobs)
                session.progress.refresh()
            return roots + self._run(session, jobs, total=len(jobs))
        finally:
            self._close(session)

    # ------------------------------------------------------------ setup

    def _session(self, game, records_dir, records_tag, clem_files: bool = False) -> PlaySession:
        entry = game_entry(game)
        bench = load_benchmark(entry)
        players = int(entry.spec.get("players", 1) or 1)
        learner = PolicyModel(self.learner, self.max_new_tokens, self.temperature)
        if self.partner is None or players == 1:
            seats = [learner]
        else:
            partner_seats = [i for i in range(players) if i != self.learner_seat] if self.partner_seats is None \
                else self.partner_seats
            if not 0 <= self.learner_seat < players or not set(partner_seats) < set(range(players)):
                raise PlaypenError(f"'{entry.name}' has seats 0..{players - 1}: the learner needs one of them "
                                   f"(learner_seat {self.learner_seat}, partner_seats {partner_seats})")
            seats = [self.partner if i in partner_seats else learner for i in range(players)]
        models_id = model_identifier([m.name for m in seats])
        infos = backends.Model.to_infos(seats)
        writer = RecordWriter(records_dir, models_id, records_tag, infos, game_path=entry.path) \
            if records_dir is not None else None
        interactive = self.progress and sys.stderr.isatty()
        progress = None
        if interactive:
            from tqdm import tqdm

            progress = tqdm(total=0, desc=f"{entry.name}", unit="ep", dynamic_ncols=True, leave=False)
        session = PlaySession(entry.name, bench, seats, models_id, infos, writer, progress)
        if clem_files:
            from clemcore.clemgame import GameBenchmarkCallbackList, RunFileSaver
            from clemcore.clemgame.callbacks.files import PlayerFileSaver, SignalFileSaver

            session.folders = ClaimedFolders(Path(records_dir), models_id)
            session.callbacks = GameBenchmarkCallbackList([  # `clem run`'s savers of what the engine does not write
                RunFileSaver(session.folders, player_model_infos=infos), PlayerFileSaver(session.folders),
                SignalFileSaver(session.folders)])
            session.callbacks.on_benchmark_start(bench)
        return session

    def _close(self, session: PlaySession, wait: bool = True) -> None:
        if session.progress is not None:
            session.progress.close()
        if session.writer is not None:
            if wait:
                session.writer.close()
            else:
                self._open_writers.append(session.writer)
        if session.callbacks is not None:
            session.callbacks.on_benchmark_end(session.bench)

    @staticmethod
    def _saved(session: PlaySession, gm, instance: dict, error: str | None, path: Path) -> None:
        """clemcore's savers write an episode's files into the folder the writer claimed for it (writer threads)."""
        session.folders.claimed[id(gm)] = path
        try:
            session.callbacks.on_game_end(gm, instance, None if error is None else RuntimeError(error))
        finally:
            del session.folders.claimed[id(gm)]

    # ------------------------------------------------------------ scheduling

    def _run(self, session: PlaySession, jobs: list[Job], total: int) -> list[Episode]:
        if session.progress is not None and session.progress.total < total:
            session.progress.total = total
            session.progress.refresh()
        results: list[Episode | None] = [None] * len(jobs)
        pending = deque(enumerate(jobs))
        live: list[LiveEpisode] = []
        while pending or live:
            while pending and len(live) < self.batch_size:
                index, job = pending.popleft()
                live.append(self._start(session, index, job))
            self._answer_others(live)
            if any(item.done for item in live):
                for item in live:
                    if item.done:
                        results[item.index] = self._finish(session, item)
                live = [item for item in live if not item.done]
                if pending:
                    continue  # refill the freed slots before the next wave
            waves: dict[int, tuple[LocalPolicy, list[LiveEpisode]]] = {}
            for item in live:
                policy = item.gm.current_player.model.policy
                waves.setdefault(id(policy), (policy, []))[1].append(item)
            for policy, group in waves.values():
                self._wave(session, policy, group)
        return results

    def _start(self, session: PlaySession, index: int, job: Job) -> LiveEpisode:
        if job.snapshot is not None:
            snap = self._copy_snapshot(session, job.snapshot)
            recorder = next(x for x in snap.gm._loggers if isinstance(x, GameInteractionsRecorder))
            return LiveEpisode(index, job, snap.gm, recorder, uuid.uuid4().hex[:12], snap.convs, snap.step_infos)
        experiment, instance = job.experiment, job.instance
        where = f"{session.game}: experiment '{experiment['name']}' instance {instance['game_id']}"
        try:
            gm = session.bench.create_game_master(experiment, session.seats)
            gm.setup(**copy.deepcopy(instance))
        except Exception as e:  # noqa: BLE001 - a game rejecting its own instance is bad input
            raise PlaypenError(f"{where} failed to set up: {type(e).__name__}: {e}") from None
        recorder = GameInteractionsRecorder(session.game, experiment["name"], instance["game_id"],
                                            session.models_id, session.infos)
        for player in gm.get_players():
            recorder.log_player(player.name, player.game_role, player.model.name)
        gm.register(recorder)
        if session.callbacks is not None:
            session.callbacks.on_game_start(gm, instance)  # (as clemcore's runner: after setup, before before_game)
        item = LiveEpisode(index, job, gm, recorder, uuid.uuid4().hex[:12])
        if session.snapshot_turn is not None:
            item.snapshots = []
        try:
            gm.before_game()
        except Exception as e:  # noqa: BLE001
            item.fail(f"before_game failed: {type(e).__name__}: {e}")
        return item

    def _is_learner(self, player) -> bool:
        return isinstance(player.model, PolicyModel) and player.model.policy is self.learner

    def _answer_others(self, live: list[LiveEpisode]) -> None:
        """Let non-policy seats (programmatic players, clemcore models) answer until every live episode waits
        for a local policy or has ended. Batchable models answer all their pending turns in one call."""
        while True:
            waiting = [x for x in live if not x.done and not isinstance(x.gm.current_player.model, PolicyModel)]
            if not waiting:
                return
            batch = [x for x in waiting if x.gm.current_player.model.supports_batching()
                     and candidates(x.gm.current_player) == 1]
            batched = {id(x) for x in batch}
            if batch:
                players = [x.gm.current_player for x in batch]
                contexts = [x.gm.get_context_for(p) or GAME_ENDED_CONTEXT for x, p in zip(batch, players)]
                try:
                    answers = Player.batch_response(players, contexts, row_ids=list(range(len(batch))))
                except Exception as e:  # noqa: BLE001 - a crashing partner ends these episodes, not the run
                    for x in batch:
                        x.fail(f"partner failed: {type(e).__name__}: {e}")
                    continue
                for row, x in enumerate(batch):
                    self._step(x, answers[row][1])
            for x in waiting:
                if id(x) in batched or x.done:
                    continue
                player = x.gm.current_player
                try:
                    response = player(x.gm.get_context_for(player) or GAME_ENDED_CONTEXT)
                except Exception as e:  # noqa: BLE001
                    x.fail(f"partner failed: {type(e).__name__}: {e}")
                    continue
                self._step(x, response)

    def _step(self, item: LiveEpisode, response: str) -> None:
        try:
            done, info = item.gm.step(response)
        except Exception as e:  # noqa: BLE001 - a game crashing on some response ends that episode only
            log.warning("%s crashed in step(): %s: %s", type(item.gm).__name__, type(e).__name__, e)
            item.fail(f"game master step failed: {type(e).__name__}: {e}")
            return
        item.step_infos.append(info)
        if done:
            item.done = True

    def _wave(self, session: PlaySession, policy: LocalPolicy, group: list[LiveEpisode]) -> None:
        default = self.temperature if policy is self.learner else self.partner_temperature
        requests = []  # (item, conversation, player, sequences: one per candidate, temperature)
        for item in group:
            player = item.gm.current_player
            conv = item.convs.get(player.name)
            if item.snapshots is not None and self._is_learner(player) and self._traced(item) == player.name:
                turn = conv.turns if conv is not None else 0
                if session.snapshot_turn == "all" or session.snapshot_turn == turn:
                    item.snapshots.append(self._take_snapshot(session, item, turn))
            context = item.gm.get_context_for(player) or GAME_ENDED_CONTEXT
            perspective = player.perceive_context(context)
            if conv is None:
                conv = item.convs[player.name] = Conversation(policy, player.name, player.game_role)
            seq, n = conv.prepare(perspective), candidates(player)
            temperature = default if n == 1 else float(getattr(player, "candidate_temperature", None) or default)
            requests.append((item, conv, player, [seq] + [seq.copy() for _ in range(n - 1)], temperature))
        # what clemcore's huggingface_local backend records of a call (player_N.requests.json), when asked for
        prompts = [policy.decode(r[3][0].ids) for r in requests] if session.callbacks is not None else None
        call_start = datetime.now()
        outs = generate_groups(policy, [r[3] for r in requests], [r[4] for r in requests],
                               max_new_tokens=self.max_new_tokens, generator=self._generator_for(policy),
                               keep_cache=self.kv_cache, prefix_cache=session.prefix_caches.setdefault(id(policy), {}))
        for i, (item, conv, player, seqs, _) in enumerate(requests):
            failed = next((out.error for out in outs[i] if out.error is not None), None)
            if failed is not None:
                item.fail(failed)
                continue
            raws = [policy.decode(out.reply_ids) for out in outs[i]]
            texts = [clean_reply(raw) for raw in raws]
            chosen = 0
            if len(texts) > 1:
                try:
                    chosen = player.choose(texts)
                except Exception as e:  # noqa: BLE001 - a chooser that fails ends this episode, not the run
                    item.fail(f"choosing among {len(texts)} candidates failed: {type(e).__name__}: {e}")
                    continue
                conv.seq = seqs[chosen]  # the chosen candidate's tokens (and cache) continue the conversation
            conv.add_reply(outs[i][chosen], raws[chosen], texts[chosen])
            call = None
            if prompts is not None:
                call = {"prompt": {"inputs": prompts[i], "max_new_tokens": self.max_new_tokens,
                                   "temperature": requests[i][4]},
                        "response_object": {"response": raws[chosen], "clem_player": {
                            "call_start": str(call_start), "call_duration": str(datetime.now() - call_start),
                            "response": texts[chosen], "model_name": player.model.name}}}
            player.perceive_response(texts[chosen], metadata=call)
            self._step(item, texts[chosen])

    def _generator_for(self, policy: LocalPolicy) -> torch.Generator | None:
        if self._seed is None:
            return None
        if id(policy) not in self._generators:
            offset = 0 if policy is self.learner else 1 + len(self._generators)
            self._generators[id(policy)] = torch.Generator(device=policy.device).manual_seed(self._seed + offset)
        return self._generators[id(policy)]

    def _traced(self, item: LiveEpisode) -> str | None:
        for player in item.gm.get_players():
            if self._is_learner(player):
                return player.name
        return None

    # ------------------------------------------------------------ branching support

    def _take_snapshot(self, session: PlaySession, item: LiveEpisode, turn: int) -> Snapshot:
        memo = {id(m): m for m in session.seats}
        return Snapshot(copy.deepcopy(item.gm, memo), {k: c.copy() for k, c in item.convs.items()},
                         copy.deepcopy(item.step_infos), turn)

    def _copy_snapshot(self, session: PlaySession, snap: Snapshot) -> Snapshot:
        copied = LiveEpisode(0, None, snap.gm, None, "", snap.convs, snap.step_infos)
        return self._take_snapshot(session, copied, snap.turn)

    # ------------------------------------------------------------ results

    def _finish(self, session: PlaySession, item: LiveEpisode) -> Episode:
        job, gm = item.job, item.gm
        interactions = item.recorder.interactions
        scores, error = None, item.error
        if error is None:
            try:
                scorer = session.bench.create_game_scorer(job.experiment, job.instance)
                scorer.compute_scores(interactions)
                scores = scorer.scores
            except Exception as e:  # noqa: BLE001 - report, do not crash the run
                error = f"scoring failed: {type(e).__name__}: {e}"
        if error is not None:
            log.warning("%s episode (experiment %s, game_id %s) ended with an error: %s", session.game,
                        job.experiment["name"], job.instance["game_id"], error)
        episode_scores = dict(scores["episode scores"]) if scores else \
            {"Aborted": 1, "Lose": 0, "Success": 0, "Main Score": float("nan")}
        reward, aborted, success = reward_from(episode_scores)
        traces = []
        for player in gm.get_players():
            if not self._is_learner(player):
                continue
            conv = item.convs.get(player.name)
            if conv is not None:
                traces.append(conv.trace())
            else:
                traces.append(idle_trace(self.learner, player.name, player.game_role, gm.get_context_for(player)))
        main = traces[0]
        meta = interactions.get("meta", {})
        episode = Episode(
            game=session.game, experiment=job.experiment["name"], game_id=job.instance["game_id"],
            group_index=job.group_index, messages=main.messages, prompt_ids=main.prompt_ids,
            completion_ids=main.completion_ids, env_mask=main.env_mask, logprobs=main.logprobs,
            episode_scores=episode_scores, reward=reward, aborted=aborted, success=success,
            num_turns=int(meta.get("round_count") or len(interactions.get("turns", [])) or 0),
            uid=item.uid, learner_turns=main.learner_turns, player=main.player, role=main.role, traces=traces,
            turn_scores=dict(scores.get("round scores", {})) if scores else {}, step_infos=item.step_infos,
            interactions=interactions, instance=job.instance, branch=job.branch, error=error)
        if item.snapshots is not None:
            session.snapshots[item.index] = item.snapshots
        if session.writer is not None:
            branch_index = job.branch.index if job.branch else 0
            saved = None if session.callbacks is None else \
                functools.partial(self._saved, session, gm, job.instance, error)
            session.writer.submit(EpisodeRecord(
                session.game, job.experiment, job.instance, interactions, scores,
                preferred_name(job.instance["game_id"], job.group_index, branch_index), error, episode, saved))
        if session.progress is not None:
            session.progress.update(1)
        return episode
