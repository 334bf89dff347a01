"""playpen.games.registry and .instances: game registries, selectors and instance files a user points at."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.games.registry import resolve_game
from tests.helpers import refused


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_game_registry_pointing_to_missing_folder(tmp_path):
    write(tmp_path / "game_registry.json", json.dumps([{"benchmark_path": "nowhere/clembench"}]))
    with pytest.raises(PlaypenError, match="benchmark_path nowhere/clembench does not exist"):
        resolve_game("wordle", cwd=tmp_path)
    with pytest.raises(PlaypenError, match="unknown game 'no-such-game'; available:"):
        resolve_game("no-such-game")


@pytest.mark.parametrize("path,message", [
    ("/", "entry 0: no clemgame.json found in / (searched 3 levels down)"),
    ("notes.txt", "entry 0: benchmark_path notes.txt is a file, not a folder"),
])
def test_a_benchmark_path_that_is_not_a_benchmark(capsys, clean_cwd, path, message):
    (clean_cwd / "notes.txt").write_text("not a benchmark")
    (clean_cwd / "game_registry.json").write_text(json.dumps([{"benchmark_path": path}]))
    err = refused(capsys, ["list", "games"], clean_cwd)
    assert message in err, err


def test_a_selector_key_no_game_has_selects_as_clem_does_and_says_so(capsys, clean_cwd):
    """Side by side with clemcore's own selection: the same games, plus a warning naming the key."""
    from clemcore.clemgame import GameRegistry

    from playpen.games.registry import game_entries, select_games

    selector = "{'lang': 'de'}"
    ours = [e.name for e in select_games([selector])]
    entries = [e for e in game_entries() if e.name == e.spec["game_name"]]
    clems = [s["game_name"] for s in GameRegistry([e.clem_spec() for e in entries])
             .get_game_specs_that_unify_with(selector, verbose=False)]
    assert ours == clems and len(ours) > 1
    assert "no game has the key(s) lang, so (as in `clem run`) they match every game" in capsys.readouterr().err
    select_games(["{'main_game': 'wordle'}"])
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("data,message", [
    ({"experiments": [{"name": "a", "game_instances": []}]}, "has no game instances"),
    ({"experiments": [{"name": "../../x", "game_instances": [{"game_id": 0}]}]},
     "name '../../x' is not a safe name"),
])
def test_instances_that_cannot_be_played(data, message):
    from playpen.games.instances import instance_pairs

    with pytest.raises(PlaypenError, match=re.escape(message)):
        instance_pairs(data, "in/instances.json")


def test_a_generator_that_imports_its_own_package(clean_cwd, monkeypatch):
    """clembench runs instancegenerator.py from the benchmark root: `from wordle.utils import ...` and
    `from privateshared import ...` work there, and so they must here."""
    import shutil

    from playpen.games.instances import generate_instances
    from playpen.games.registry import resolve_game

    bench = clean_cwd / "bench"
    shutil.copytree(Path(__file__).parent / "data" / "minibench" / "wordle", bench / "wordle")
    (bench / "wordle" / "utils.py").write_text("PER_EXPERIMENT = 2\n")
    (bench / "privateshared").mkdir()
    (bench / "privateshared" / "hints.py").write_text("def hint(word):\n    return f' Starts with {word[0]}.'\n")
    generator = bench / "wordle" / "instancegenerator.py"
    generator.write_text(generator.read_text()
                         .replace("PER_EXPERIMENT = 3\n", "from wordle.utils import PER_EXPERIMENT\n")
                         .replace("f\" Hint: the word starts with '{word[0]}'.\"", "__import__('privateshared.hints')"
                                  ".hints.hint(word)"))
    (clean_cwd / "game_registry.json").write_text(json.dumps([{"benchmark_path": "bench"}]))
    before = list(__import__("sys").path)
    instances, _ = generate_instances(resolve_game("wordle"), seed=7)
    assert [len(e["game_instances"]) for e in instances["experiments"]] == [2, 2]
    assert "Starts with" in instances["experiments"][0]["game_instances"][0]["prompt"]
    assert __import__("sys").path == before
    for module in ("wordle", "wordle.utils", "privateshared", "privateshared.hints"):
        monkeypatch.delitem(__import__("sys").modules, module, raising=False)
