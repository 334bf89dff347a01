"""The rollout engine on the tiny model and the built-in games' real clemcore game masters: exact batched
KV-cached sampling, the Episode token invariant, clem-layout records that `clem score` reads, no clobbering,
teachers and self-play, branching and preference pairs, bad input."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from playpen.errors import PlaypenError
from playpen.games.instances import load_instances
from playpen.rollout import Episode, LocalPolicy, RolloutEngine, preference_pairs
from playpen.rollout.episode import BranchInfo
from playpen.rollout.generation import Sequence, generate
from playpen.records import EpisodeRecord, RecordWriter
from tests.helpers import engine

REPO = Path(__file__).resolve().parents[1]


def assert_trace_invariant(tokenizer, trace, exact_tokens: bool):
    ids = trace.prompt_ids + trace.completion_ids
    assert len(trace.completion_ids) == len(trace.env_mask) == len(trace.logprobs)
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(trace.messages, tokenize=False)
    if exact_tokens:
        assert ids == tokenizer.apply_chat_template(trace.messages, tokenize=True, return_dict=True)["input_ids"]
    assert all(lp == 0.0 for lp, m in zip(trace.logprobs, trace.env_mask) if not m)
    assert all(lp <= 0.0 for lp, m in zip(trace.logprobs, trace.env_mask) if m)
    replies = [m["content"] for m in trace.messages if m["role"] == "assistant"]
    assert len(replies) == trace.learner_turns or (trace.learner_turns == 0 and replies == [""])


# ---------------------------------------------------------------- generation


def test_batched_cached_waves_sample_with_exact_logprobs(tiny_model, monkeypatch):
    """Ragged rows, several turns, rows finishing at different steps (compaction), a shared prompt prefix encoded
    once, fresh prompts joining running rows (encoded apart first): every sampled token's logprob equals a plain
    full forward over the final sequence, so cache reuse changes nothing."""
    from playpen.rollout import kvcache

    model, tokenizer = tiny_model
    policy = LocalPolicy(model, tokenizer, name="t")
    policy.stop_ids = sorted(set(policy.stop_ids) | set(tokenizer.encode("S E")))  # rows stop at varied steps
    prefilled, shared = [], []
    prefill, share = kvcache.prefill_long_rows, kvcache.share_prefix
    monkeypatch.setattr(kvcache, "prefill_long_rows", lambda *a: prefilled.append(prefill(*a)))
    monkeypatch.setattr(kvcache, "share_prefix", lambda *a: shared.append(share(*a)))

    def fresh(i, joining=False):  # first prompts share an opening; joining ones do not
        text = (f"Game {i}: " * 8 if joining else "We play wordle now, you guess. ") * (1 + i % 4)
        return Sequence(policy.encode(policy.render([{"role": "user", "content": text}], True)))

    seqs = [fresh(i) for i in range(8)]
    marks = [[] for _ in seqs]
    gen = torch.Generator().manual_seed(0)
    lengths = set()
    for turn in range(3):
        outs = generate(policy, seqs, max_new_tokens=12, temperature=2.0, generator=gen)
        for i, (seq, out) in enumerate(zip(seqs, outs)):
            start = len(seq.ids) - len(out.ids)
            marks[i] += list(zip(range(start, len(seq.ids)), out.logprobs))
            lengths.add(len(out.ids))
            assert seq.cached == len(seq.ids) - 1
            seq.ids += policy.encode(f"\n<|im_start|>user\n{'x ' * (i % 5)}<|im_end|>\n<|im_start|>assistant\n")
        if turn == 0:  # two episodes end, two new ones take their slots
            for i in (2, 5):
                seqs[i], marks[i] = fresh(i, joining=True), []
    assert len(lengths) > 3, "rows should stop at different steps"
    assert max(prefilled) == 2, "the joining prompts are encoded apart"
    assert shared[0] >= 16, "the first prompts share their opening, encoded once"
    worst = 0.0
    with torch.no_grad():
        for seq, mark in zip(seqs, marks):
            logp = torch.log_softmax(model(torch.tensor([seq.ids])).logits[0].float() / 2.0, -1)
            worst = max(worst, max(abs(logp[pos - 1, seq.ids[pos]].item() - lp) for pos, lp in mark))
    assert worst < 1e-4


def test_greedy_waves_equal_hf_generate_with_and_without_cache(policy, tiny_model):
    model, _ = tiny_model
    prompts = [[{"role": "user", "content": "Let us play. " * (1 + i % 3) + f"Round {i}."}] for i in range(5)]
    cached = [Sequence(policy.encode(policy.render(p, True))) for p in prompts]
    plain = [s.copy() for s in cached]
    for turn in range(2):
        refs = []
        for seq in cached:
            out = model.generate(torch.tensor([seq.ids]), attention_mask=torch.ones(1, len(seq.ids), dtype=torch.long),
                                 max_new_tokens=10, do_sample=False, pad_token_id=policy.pad_id,
                                 eos_token_id=policy.stop_ids)
            refs.append([t for t in out[0, len(seq.ids):].tolist()])
        a = generate(policy, cached, max_new_tokens=10, temperature=0.0)
        b = generate(policy, plain, max_new_tokens=10, temperature=0.0, keep_cache=False)
        for ref, x, y in zip(refs, a, b):
            assert x.ids == y.ids == ref[:len(x.ids)]
            assert all(t == policy.pad_id for t in ref[len(x.ids):])
        for s in cached + plain:
            s.ids += policy.encode("\n<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n")
        assert all(s.block is None for s in plain) and all(s.block is not None for s in cached)


# ---------------------------------------------------------------- play


def test_play_wordle_returns_contract_episodes(policy, tiny_model):
    _, tokenizer = tiny_model
    instances = load_instances("wordle", "validation", limit=3)
    episodes = engine(policy).play("wordle", instances, group_size=2)
    assert [(e.game_id, e.group_index) for e in episodes] == \
        [(i["game_id"], g) for _, i in instances for g in range(2)]
    for episode in episodes:
        assert isinstance(episode, Episode) and episode.game == "wordle" and episode.error is None
        assert episode.messages[0]["role"] == "user" and episode.messages[-1]["role"] == "assistant"
        assert_trace_invariant(tokenizer, episode.traces[0], exact_tokens=True)
        assert episode.prompt_ids == tokenizer.apply_chat_template(
            episode.messages[:1], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        assert sum(episode.env_mask) > 0 and episode.num_turns >= episode.learner_turns >= 1
        scores = episode.episode_scores
        assert {"Main Score", "Aborted", "Success", "Lose", "Request Count"} <= set(scores)
        expected = -1.0 if scores["Aborted"] else scores["Main Score"] / 100
        assert episode.reward == expected and episode.aborted == bool(scores["Aborted"])
        assert episode.success == bool(scores["Success"])
    # greedy copies of one instance are identical
    assert episodes[0].completion_ids == episodes[1].completion_ids


@pytest.mark.parametrize("shout", [False, True], ids=["verbatim-template", "template-rewrites-user-text"])
def test_kept_template_suffixes_equal_full_renders(tiny_model, shout):
    """suffix_after_reply keeps a suffix per role sequence with a placeholder for the next message; whatever it
    returns must equal rendering the whole conversation, also for texts with edge whitespace and for a template
    that rewrites user text (there the check fails once and every later call renders)."""
    import copy

    model, tokenizer = tiny_model
    if shout:
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.chat_template = tokenizer.chat_template.replace(
            "message['content'] + '<|im_end|>' }}{%- endif", "message['content'] | upper + '<|im_end|>' }}{%- endif")
    fresh, kept = LocalPolicy(model, tokenizer), LocalPolicy(model, tokenizer)
    conversation = [{"role": "user", "content": "Guess a word."}, {"role": "assistant", "content": "GUESS: crane"}]
    nexts = ["feedback: c<red> r<red>", "  padded feedback\n", "feedback: a<green>", "", None]
    for turn in range(3):
        for text in nexts:
            message = None if text is None else {"role": "user", "content": text}
            for stopped in (True, False):
                expected = fresh._render_suffix(conversation, message, stopped)
                assert kept.suffix_after_reply(conversation, message, stopped) == expected
        conversation += [{"role": "user", "content": f"feedback {turn}"},
                         {"role": "assistant", "content": "GUESS: slate"}]
    with_text = [v for (roles, next_role, stopped), v in kept._suffixes.items() if next_role is not None]
    assert with_text and all(v is None for v in with_text) if shout else all(kept._suffixes.values())


def test_play_restores_training_mode_and_works_on_peft_models(tiny_model):
    from peft import LoraConfig, get_peft_model

    model, tokenizer = tiny_model
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    try:
        peft_model.train()
        learner = LocalPolicy(peft_model, tokenizer, name="tiny-lora")
        episodes = engine(learner, temperature=1.0, seed=3).play(
            "arithmetic", load_instances("arithmetic", "train", limit=2))
        assert peft_model.training and len(episodes) == 2
        assert all(e.learner_turns == 1 and len(e.logprobs) == len(e.completion_ids) for e in episodes)
    finally:
        peft_model.unload()
        model.eval()


def test_taboo_self_play_traces_both_seats(policy, tiny_model):
    _, tokenizer = tiny_model
    episodes = engine(policy).play("taboo", load_instances("taboo", "validation", limit=2))
    for episode in episodes:
        assert [t.player for t in episode.traces] == ["Player 1", "Player 2"]
        assert episode.player == "Player 1" and episode.role == "Describer"
        for trace in episode.traces:  # a seat that never replied still has a (maskable) trace
            assert_trace_invariant(tokenizer, trace, exact_tokens=True)
            assert trace.prompt_ids and (trace.learner_turns > 0 or not any(trace.env_mask))


def test_taboo_with_expert_teacher_puts_partner_messages_in_env_tokens(policy, tiny_model, tmp_path):
    from playpen.games import expert_model

    _, tokenizer = tiny_model
    eng = engine(policy, partner=expert_model(seed=1), learner_seat=1)  # learner guesses, expert describes
    episodes = eng.play("taboo", load_instances("taboo", "validation", limit=3), records_dir=tmp_path)
    for episode in episodes:
        assert len(episode.traces) == 1 and episode.role == "Guesser"
        assert episode.messages[0]["content"].count("CLUE") >= 1  # the expert's clue is the learner's context
        assert_trace_invariant(tokenizer, episode.traces[0], exact_tokens=True)
        assert episode.record_path.parts[-4] == "programmatic--playpen-tiny"
    multi = [e for e in episodes if e.learner_turns > 1]
    assert multi, "a wrong guess continues the game: later clues are environment tokens"
    env_text = tokenizer.decode([t for t, m in zip(multi[0].completion_ids, multi[0].env_mask) if not m])
    assert "CLUE" in env_text


def test_local_policy_teacher_plays_the_partner_seat(policy, tiny_model, tmp_path):
    _, tokenizer = tiny_model
    teacher = LocalPolicy(*tiny_model, name="tiny-teacher")
    episodes = engine(policy, partner=teacher, partner_temperature=0.0).play(
        "taboo", load_instances("taboo", "validation", limit=2), records_dir=tmp_path, records_tag="t")
    for episode in episodes:
        assert [t.player for t in episode.traces] == ["Player 1"]  # only the learner's seat is traced
        players = episode.interactions["players"]
        assert players["Player 1"]["model_name"] == "playpen-tiny"
        assert players["Player 2"]["model_name"] == "tiny-teacher"
        assert episode.record_path.parts[-5] == "playpen-tiny--tiny-teacher"
        assert_trace_invariant(tokenizer, episode.traces[0], exact_tokens=True)


# ---------------------------------------------------------------- records


def test_records_layout_and_clem_score_subprocess(policy, tmp_path):
    records = tmp_path / "playpen-records"
    episodes = engine(policy).play("wordle", load_instances("wordle", "validation", limit=2), group_size=2,
                                   records_dir=records, records_tag="step_00003")
    base = records / "playpen-tiny" / "step_00003" / "wordle"
    for episode in episodes:
        path = episode.record_path
        assert path.parent.parent == base and path.name.startswith(f"instance_{episode.game_id:05d}")
        assert {p.name for p in path.iterdir()} == {"instance.json", "interactions.json", "scores.json"}
        assert (path.parent / "experiment.json").is_file()
        assert not list(path.parent.glob(".*.tmp"))
    assert len({e.record_path for e in episodes}) == 4
    (tmp_path / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(REPO / "playpen" / "games")}]))
    for episode in episodes:
        (episode.record_path / "scores.json").unlink()
    done = subprocess.run([str(Path(sys.executable).parent / "clem"), "score", "-g", "wordle", "-r", str(records)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    for episode in episodes:
        clem = json.loads((episode.record_path / "scores.json").read_text())["episode scores"]
        assert clem.keys() == episode.episode_scores.keys()
        for key, value in clem.items():
            mine = episode.episode_scores[key]
            assert value == mine or (math.isnan(value) and math.isnan(mine)), key
    from clemcore.clemgame.transcripts.builder import build_transcripts

    build_transcripts(str(records), ["wordle"])
    assert all((e.record_path / "transcript.html").is_file() for e in episodes)


def test_two_jobs_writing_the_same_tag_never_clobber(policy, tmp_path):
    instances = load_instances("arithmetic", "validation", limit=2)
    first = engine(policy).play("arithmetic", instances, records_dir=tmp_path, records_tag="step_1")
    second = engine(policy).play("arithmetic", instances, records_dir=tmp_path, records_tag="step_1")
    paths = [e.record_path for e in first + second]
    assert len(set(paths)) == 4 and all(p.name.endswith(".1") for p in paths[2:])
    assert len(list(tmp_path.rglob("interactions.json"))) == 4
    # racing writers (two jobs on shared storage) claim distinct folders
    record = EpisodeRecord("g", {"name": "e"}, {"game_id": 7}, {"turns": []}, None, "instance_00007")
    writers = [RecordWriter(tmp_path / "race", "m", "t", {}) for _ in range(2)]
    threads = [threading.Thread(target=lambda w=w: [w.submit(record) for _ in range(20)]) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = [p for w in writers for p in w.close()]
    assert len(set(written)) == 40 and all((p / "interactions.json").is_file() for p in written)


def test_progress_bar_is_quiet_without_a_tty(policy, capfd):
    RolloutEngine(policy, max_new_tokens=4, batch_size=2, progress=True).play(
        "arithmetic", load_instances("arithmetic", "validation", limit=2))
    assert "ep/s" not in capfd.readouterr().err


# ---------------------------------------------------------------- branching


def test_branches_share_a_prefix_and_give_preference_pairs(policy, tiny_model):
    _, tokenizer = tiny_model
    eng = engine(policy, temperature=1.5, seed=7, max_new_tokens=10)
    episodes = eng.branch("wordle", load_instances("wordle", "train", limit=4), branch_factor=3, branch_turn=0)
    roots = [e for e in episodes if e.branch and e.branch.index == 0]
    assert len(roots) == 4 and len(episodes) == 12
    for root in roots:
        group = [e for e in episodes if e.branch and e.branch.root == root.uid]
        assert len(group) == 3 and {e.branch.turn for e in group} == {0}
        for e in group:
            assert e.prompt_ids == root.prompt_ids and e.messages[0] == root.messages[0]
            assert_trace_invariant(tokenizer, e.traces[0], exact_tokens=False)
    pairs = preference_pairs(episodes)
    for pair in pairs:
        assert pair["prompt"][-1]["role"] == "user" and pair["chosen"][0]["role"] == "assistant"
        assert pair["meta"]["chosen_reward"] > pair["meta"]["rejected_reward"]


def test_preference_pairs_pick_best_and_worst_and_skip_ties():
    def ep(root, reward, reply):
        return Episode("g", "e", 1, 0, [{"role": "user", "content": "p"}, {"role": "assistant", "content": reply}],
                       [], [], [], [], {}, reward, False, False, 1, branch=BranchInfo(root, 0, 0))

    pairs = preference_pairs([ep("a", 0.2, "x"), ep("a", 1.0, "y"), ep("a", -1.0, "z"),
                              ep("b", 0.5, "u"), ep("b", 0.5, "v")])
    assert len(pairs) == 1
    assert pairs[0]["chosen"][0]["content"] == "y" and pairs[0]["rejected"][0]["content"] == "z"
    assert pairs[0]["prompt"] == [{"role": "user", "content": "p"}]


# ---------------------------------------------------------------- bad input and limits


def test_unknown_game_lists_available_ones(policy):
    with pytest.raises(PlaypenError, match=r"unknown game 'wordel'; did you mean wordle\? available: .*wordle"):
        engine(policy).play("wordel", [])


def test_invalid_instances_are_one_clear_error(policy, tmp_path, monkeypatch):
    game = tmp_path / "games" / "broken"
    shutil.copytree(REPO / "playpen" / "games" / "arithmetic", game)
    spec = json.loads((game / "clemgame.json").read_text())
    (game / "clemgame.json").write_text(json.dumps({**spec, "game_name": "broken"}))
    (game / "in" / "instances_train.json").write_text(json.dumps(
        {"experiments": [{"name": "x", "game_instances": [{"game_id": "one"}]}]}))
    (game / "in" / "instances.json").write_text('{"experiments": [')
    (tmp_path / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(tmp_path / "games")}]))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlaypenError, match=r"instances_train.json: experiments\[0\].game_instances\[0\]: needs an "
                                           r"integer 'game_id'"):
        load_instances("broken", "train")
    with pytest.raises(PlaypenError, match=r"instances.json:1:\d+: malformed JSON"):
        load_instances("broken", "validation")
    with pytest.raises(PlaypenError, match=r"instances\[0\]: needs an integer 'game_id'"):
        engine(policy).play("arithmetic", [({"name": "x"}, {"id": 1})])
    with pytest.raises(PlaypenError, match="failed to set up"):
        engine(policy).play("arithmetic", [({"name": "x"}, {"game_id": 1})])


def test_context_overflow_ends_the_episode_not_the_run(policy, tiny_model, monkeypatch):
    monkeypatch.setattr(type(policy), "max_positions", property(lambda self: 300))
    episodes = engine(policy).play("wordle", load_instances("wordle", "validation", limit=2))
    for episode in episodes:
        assert episode.aborted and episode.reward == -1.0 and "context window" in episode.error


def test_clem_files_are_written_by_clemcores_savers_beside_the_records(policy, tmp_path):
    """clem_files: run.json, completed.json and one player_N.requests.json call per learner reply, as clem run
    writes them; only one episode per instance (clem's layout)."""
    episodes = engine(policy).play("wordle", load_instances("wordle", "validation", limit=2), records_dir=tmp_path,
                                   clem_files=True)
    run = json.loads((tmp_path / "playpen-tiny" / "run.json").read_text())
    assert run["games"]["wordle"]["num_instances"] == 2 and run["player_models"]
    for episode in episodes:
        files = {p.name for p in episode.record_path.iterdir()}
        assert files == {"instance.json", "interactions.json", "scores.json", "completed.json",
                         "player_1.requests.json"}
        requests = json.loads((episode.record_path / "player_1.requests.json").read_text())
        assert requests["meta"]["game_id"] == episode.game_id and requests["meta"]["completed"]
        assert len(requests["calls"]) == episode.learner_turns
        call = requests["calls"][0]["call"]
        assert call["manipulated_prompt_obj"]["inputs"].startswith(policy.decode(episode.prompt_ids)[:40])
    with pytest.raises(PlaypenError, match="clem_files records one episode per instance"):
        engine(policy).play("wordle", load_instances("wordle", "validation", limit=1), group_size=2,
                            records_dir=tmp_path, clem_files=True)


def test_a_model_played_once_is_freed_with_its_last_reference(tiny):
    """What the engine learns about a model (its forward, its attention layers) must not keep it alive: an eval of
    many checkpoints, or a study, in one process would hold every model it ever played."""
    import gc
    import weakref

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32).eval()
    played = RolloutEngine(LocalPolicy(model, AutoTokenizer.from_pretrained(str(tiny)), name="once"),
                           max_new_tokens=4, temperature=0.0, progress=False).play(
        "wordle", load_instances("wordle", "train", limit=2))
    assert len(played) == 2
    gone = weakref.ref(model)
    del model, played
    gc.collect()
    assert gone() is None
