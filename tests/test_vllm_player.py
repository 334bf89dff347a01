"""The vLLM clemcore player (playpen.models.vllm_player) against clemcore's own Hugging Face backend: a greedy debate
tournament (playpen-tiny as debater and judge, the expert and the programmatic judge beside it) played both ways
gives the same replies, verdicts and table. One vLLM engine for the module."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]


def replies(folder: Path) -> dict[str, list[str]]:
    """Every episode's player replies in order, by the episode's path under records/."""
    out = {}
    for path in sorted((folder / "records").rglob("interactions.json")):
        turns = json.loads(path.read_text())["turns"]
        out[str(path.relative_to(folder))] = [event["action"]["content"] for turn in turns for event in turn
                                              if event.get("from", "").startswith("Player")]
    return out


def matches(folder: Path) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in json.loads((folder / "matches.json").read_text()))


def test_a_greedy_tournament_with_vllm_players_is_clemcores(tmp_path):
    from playpen.debate_tools import tournament

    results = {}
    for use_vllm in (False, True):
        cfg = tournament.TournamentConfig(name=f"vllm-{use_vllm}", debaters=["playpen-tiny", "programmatic"],
                                          judges=["programmatic", "playpen-tiny"], max_instances=2,
                                          max_new_tokens=24, output_dir=str(tmp_path), use_vllm=use_vllm)
        results[use_vllm] = tournament.run(cfg, log=lambda *_: None)
    hf, vllm = (Path(results[k]["dir"]) for k in (False, True))
    a, b = replies(hf), replies(vllm)
    same = sum(a[k] == b[k] for k in a)  # (no capsys here: vLLM's engine needs a real stdout to start)
    assert len(a) == len(b) == 8 and sum(map(len, a.values())) >= 16
    assert same == len(a), f"{same}/{len(a)} greedy episodes with identical replies"
    assert matches(hf) == matches(vllm)
    assert results[False]["advocates"] == results[True]["advocates"]


def test_a_quantized_player_is_refused_in_one_line():
    from playpen.errors import PlaypenError
    from playpen.models.vllm_player import check_vllm_player

    with pytest.raises(PlaypenError, match="loaded quantized .* set use_vllm: false"):
        check_vllm_player({"model_name": "q", "backend": "huggingface_local", "huggingface_id": "x",
                           "model_config": {"load_in_4bit": True}}, "tournament: use_vllm")
