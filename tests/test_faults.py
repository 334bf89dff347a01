"""Faults that used to leave wrong results with exit 0.

A job killed during the final save, NaN weights in a checkpoint or a NaN loss, a huge `iterations`, identical
preference pairs, a metrics.jsonl cut off mid-line. Runs are playpen-tiny for 2 steps (tests/test_integrity.py's)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from playpen.cli import main
from playpen.errors import PlaypenError
from playpen.storage import RunDir, read_jsonl
from tests.test_integrity import copy_of, home, inputs, refused, run_argv, trained  # noqa: F401  (fixtures)


@pytest.fixture
def work(home: Path) -> Path:  # noqa: F811
    return home


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("cut", ["no finished.json", "finished.json cut off"])
@pytest.mark.parametrize("name", ["sft", "grpo"])
def test_killed_during_the_final_save_finishes_without_training(capsys, work, trained, inputs, name,  # noqa: F811
                                                                cut):
    """checkpoint-2 (= max_steps) is complete; the job died before finished.json: the rerun finishes from the
    checkpoint (final model = its weights, registry entry, finished.json at step 2) and trains no step 3."""
    root = copy_of(trained(name), work)
    run = root / name / "try2"
    adapter = (run / "final" / "adapter_model.safetensors").read_bytes()
    for leftover in ("model_registry.json", "learning_curve.png"):
        (run / leftover).unlink()
    if cut == "no finished.json":
        (run / "finished.json").unlink()
        for path in (run / "final").iterdir():
            path.unlink()
        (run / "final").rmdir()
    else:
        (run / "finished.json").write_text('{"global_step": 2, "fin')
    capsys.readouterr()
    assert main(run_argv(name, root, inputs)) == 0
    out = capsys.readouterr().out
    assert f"checkpoint-2 is the last step (2); finishing {run} from it, nothing trained" in out, out
    assert json.loads((run / "finished.json").read_text())["global_step"] == 2
    assert {p.name for p in (run / "checkpoints").glob("checkpoint-*")} == {"checkpoint-2"}
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == 2
    assert (run / "final" / "adapter_model.safetensors").read_bytes() == adapter  # the checkpoint's weights
    assert "optimizer.pt" not in _files(run / "final")
    assert json.loads((run / "model_registry.json").read_text())[0]["model_name"] == f"{name}-try2"
    assert main(run_argv(name, root, inputs)) == 0  # and now it is complete
    assert "already complete" in capsys.readouterr().out


def test_nan_weights_in_the_newest_checkpoint_stop_the_run(capsys, work, trained, inputs):  # noqa: F811
    """Same byte length, NaN values: refused in one line naming the file, before anything is written."""
    root = copy_of(trained("sft"), work)
    run = root / "sft" / "try2"
    (run / "finished.json").unlink()
    weights = run / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    first = sorted(k for k in header if k != "__metadata__")[0]
    start, end = (8 + length + offset for offset in header[first]["data_offsets"])
    nan = {"F32": b"\x00\x00\xc0\x7f", "BF16": b"\xc0\x7f", "F16": b"\x00\x7e"}[header[first]["dtype"]]
    data[start:end] = nan * ((end - start) // len(nan))  # in place: the file keeps its byte length
    weights.write_bytes(bytes(data))
    err = refused(capsys, run_argv("sft", root, inputs), run)
    assert f"checkpoint file {weights} is corrupt (tensor {first} holds NaN or inf values); delete " \
           f"{weights.parent} to resume from the checkpoint before it" in err, err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_loss_stops_training_naming_the_last_checkpoint(tmp_path, value):
    from playpen.train.metrics import _stop_on_non_finite_loss

    (tmp_path / "checkpoint-4").mkdir()
    _stop_on_non_finite_loss({"loss": 0.5, "learning_rate": 1e-4}, 5, tmp_path)  # finite: nothing happens
    with pytest.raises(PlaypenError, match=rf"^loss is {value} at step 5: training diverged, so it stops here "
                                           rf"\(the last checkpoint is {tmp_path / 'checkpoint-4'}\)"):
        _stop_on_non_finite_loss({"loss": value}, 5, tmp_path)


def test_the_trainer_logs_a_nan_loss_as_nan(tmp_path):
    """Transformers' logging_nan_inf_filter would log a nan loss as the window's mean: off, and not settable."""
    from trl import SFTConfig

    from playpen.train.trl_args import trl_arguments

    args = trl_arguments(SFTConfig, {"max_steps": 2}, "x.yaml", output_dir=tmp_path, seed=0, deepspeed=None,
                         defaults={})
    assert args.logging_nan_inf_filter is False
    with pytest.raises(PlaypenError, match="logging_nan_inf_filter"):
        trl_arguments(SFTConfig, {"logging_nan_inf_filter": True}, "x.yaml", output_dir=tmp_path, seed=0,
                      deepspeed=None, defaults={})


def test_a_huge_iterations_count_does_not_hang_the_resume_check(tmp_path):
    from playpen.train.dpo import DPO
    from playpen.train.rounds import DONE, iter_dir as _iter_dir

    run = RunDir(tmp_path / "run").create()
    cfg = SimpleNamespace(data=None, iterations=1_000_000_000)
    started = time.perf_counter()
    assert DPO().find_resume(cfg, run) == (None, 0)
    _iter_dir(run, 0).mkdir()
    (_iter_dir(run, 0) / DONE).write_text('{"global_step": 3}')
    assert DPO().find_resume(cfg, run) == (None, 3)
    assert not DPO().is_complete(cfg, run, 3)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("method", ["dpo", "reward"])
def test_identical_chosen_and_rejected_are_refused(capsys, work, method):
    turn = [{"role": "user", "content": "2 + 2?"}]
    same = [{"role": "assistant", "content": "4"}]
    rows = [{"prompt": turn, "chosen": same, "rejected": [{"role": "assistant", "content": "5"}]},
            {"prompt": turn, "chosen": same, "rejected": same}]
    (work / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = refused(capsys, ["train", method, "experiment=x", "data=pairs.jsonl", "storage_root=runs"], work)
    assert "pairs.jsonl:2" in err and "'chosen' and 'rejected' are the same" in err, err


# ---------------------------------------------------------------- section 4: one line instead of a traceback

def test_a_cut_off_metrics_tail_is_dropped_with_a_warning(capsys, tmp_path):
    from playpen.train.checkpoints import truncate_jsonl

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    assert [r["step"] for r in read_jsonl(metrics)] == [1, 2]
    assert f"{metrics}:3: dropped a cut-off last line" in capsys.readouterr().err
    truncate_jsonl(metrics, 2)  # on resume: the file is whole again before the next row is appended
    assert metrics.read_text() == '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n'
    metrics.write_text('{"step": 1}\n{"st\n{"step": 3}\n')  # a bad line in the middle is no cut-off tail
    with pytest.raises(PlaypenError, match=rf"^{metrics}:2: not a JSON line"):
        read_jsonl(metrics)


def test_a_broken_run_registry_is_skipped_with_a_warning(capsys, tmp_path):
    from playpen.model_registry import model_entries

    run = tmp_path / "runs" / "x" / "r1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "model_registry.json").write_text('[{"model_name": "x-r1", ')
    names = [e.name for e in model_entries(cwd=tmp_path, storage_root=tmp_path / "runs")]
    assert "playpen-tiny" in names
    err = capsys.readouterr().err
    assert f"playpen: warning: skipping a run's model registry: {run / 'model_registry.json'}:1:" in err, err


@pytest.mark.parametrize("path,message", [
    ("/", "entry 0: no clemgame.json found in / (searched 3 levels down)"),
    ("notes.txt", "entry 0: benchmark_path notes.txt is a file, not a folder"),
])
def test_a_benchmark_path_that_is_not_a_benchmark(capsys, work, path, message):
    (work / "notes.txt").write_text("not a benchmark")
    (work / "game_registry.json").write_text(json.dumps([{"benchmark_path": path}]))
    err = refused(capsys, ["list", "games"], work)
    assert message in err, err


@pytest.mark.parametrize("data,message", [
    ({"experiments": [{"name": "a", "game_instances": []}]}, "has no game instances"),
    ({"experiments": [{"name": "../../x", "game_instances": [{"game_id": 0}]}]},
     "name '../../x' is not a safe name"),
])
def test_instances_that_cannot_be_played(data, message):
    from playpen.games.instances import instance_pairs

    with pytest.raises(PlaypenError, match=re.escape(message)):
        instance_pairs(data, "in/instances.json")


def test_one_process_per_tournament_match(tmp_path):
    """Two processes on one match would write the same episode folders: the second stops in one line."""
    from playpen.config import load_config
    from playpen.debate_tools import tournament
    from playpen.storage import exclusive_folder

    cfg = load_config(tournament.TournamentConfig, "debate/tournament_tiny",
                      [f"output_dir={tmp_path}"])
    seating = tournament.matches(cfg)[0]
    marker = tournament._played_marker(cfg, seating)
    with exclusive_folder(marker.parent, "held", "-", lock_file=f".{marker.stem}.lock"):
        with pytest.raises(PlaypenError, match=rf"^match {' vs '.join(seating)} of tournament tiny is being "
                                               rf"played by another process \(pid \d+ on"):
            tournament.play_match(cfg, seating, {})
    assert not marker.exists()


def test_a_stray_file_named_like_a_checkpoint(tmp_path):
    from playpen.train.checkpoints import find_resume_checkpoint

    (tmp_path / "checkpoint-3").write_text("not a folder")
    with pytest.raises(PlaypenError, match=r"checkpoint-3 is a file, not a checkpoint folder; move it out of"):
        find_resume_checkpoint(tmp_path)


def test_an_unwritable_results_folder_is_one_line(capsys, work):
    err = refused(capsys, ["eval", "playpen-tiny", "-g", "wordle", "-r", "/sys/playpen-results"], work)
    assert "folder /sys/playpen-results cannot be written" in err, err


@pytest.mark.parametrize("source,message", [
    ("def score():\n    return []\n", "must take one argument, a list of texts, and return one number per text; "
                                      "its signature is score()"),
    ("def score(texts, labels):\n    return []\n", "its signature is score(texts, labels)"),
])
def test_a_scorer_with_the_wrong_signature(capsys, work, monkeypatch, source, message):
    module = f"scorer_{abs(hash(source))}"  # (a module imported once stays imported)
    (work / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(work))
    (work / "p.jsonl").write_text('{"prompt": "hi"}\n')
    err = refused(capsys, ["meter", "playpen-tiny", "--classifier", f"{module}:score", "--prompts", "p.jsonl",
                           "-o", "out"], work)
    assert message in err, err


def test_a_scorer_that_returns_no_numbers():
    from playpen.reward.scorers import Scorer, ScorerSpec

    scorer = Scorer(ScorerSpec("x", "callable", target="m:f"), function=lambda texts: ["high" for _ in texts])
    with pytest.raises(PlaypenError, match=r"^scorer m:f must return one number per text, returned \['high'\]"):
        scorer(["a"])


@pytest.mark.parametrize("argv", [["eval", "SmolLM2-135M-Instruct", "-g", "wordle", "-r", "res"],
                                  ["train", "sft", "experiment=x", "data=sft.jsonl", "model=SmolLM2-135M-Instruct"]])
def test_an_uncached_hub_model_offline_is_one_line(capsys, work, monkeypatch, argv):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(work / "empty-cache"))
    (work / "sft.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "a"},
                                                             {"role": "assistant", "content": "b"}]}) + "\n")
    err = refused(capsys, argv, work)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct is not in the local Hugging Face cache" in err, err


def test_a_selector_key_no_game_has_selects_as_clem_does_and_says_so(capsys, work):
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


# ---------------------------------------------------------------- section 5: the real benchmark

def test_a_generator_that_imports_its_own_package(work, monkeypatch):
    """clembench runs instancegenerator.py from the benchmark root: `from wordle.utils import ...` and
    `from privateshared import ...` work there, and so they must here."""
    import shutil

    from playpen.games.instances import generate_instances
    from playpen.games.registry import resolve_game

    bench = work / "bench"
    shutil.copytree(Path(__file__).parent / "data" / "minibench" / "wordle", bench / "wordle")
    (bench / "wordle" / "utils.py").write_text("PER_EXPERIMENT = 2\n")
    (bench / "privateshared").mkdir()
    (bench / "privateshared" / "hints.py").write_text("def hint(word):\n    return f' Starts with {word[0]}.'\n")
    generator = bench / "wordle" / "instancegenerator.py"
    generator.write_text(generator.read_text()
                         .replace("PER_EXPERIMENT = 3\n", "from wordle.utils import PER_EXPERIMENT\n")
                         .replace("f\" Hint: the word starts with '{word[0]}'.\"", "__import__('privateshared.hints')"
                                  ".hints.hint(word)"))
    (work / "game_registry.json").write_text(json.dumps([{"benchmark_path": "bench"}]))
    before = list(__import__("sys").path)
    instances, _ = generate_instances(resolve_game("wordle"), seed=7)
    assert [len(e["game_instances"]) for e in instances["experiments"]] == [2, 2]
    assert "Starts with" in instances["experiments"][0]["game_instances"][0]["prompt"]
    assert __import__("sys").path == before
    for module in ("wordle", "wordle.utils", "privateshared", "privateshared.hints"):
        monkeypatch.delitem(__import__("sys").modules, module, raising=False)


def test_loading_an_adapter_prints_no_future_warning(tmp_path):
    """PEFT reads the deprecated is_gradient_checkpointing at every adapter load: filtered for every entry point
    (a fresh interpreter, as a job or `make demo`'s evaluation starts)."""
    import subprocess
    import sys

    code = ("import playpen, warnings\n"
            "warnings.warn('`is_gradient_checkpointing` is deprecated', FutureWarning)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**__import__("os").environ,
                                             "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0 and "FutureWarning" not in proc.stderr, proc.stderr


def test_a_file_size_limit_during_a_checkpoint_save_is_one_line(work, inputs):  # noqa: F811
    """`ulimit -f` (as a full disk or quota): one line saying how to resume, not a safetensors traceback; the rerun
    skips the cut-off checkpoint."""
    import resource
    import subprocess
    import sys

    argv = [sys.executable, "-m", "playpen.cli", "train", "sft", "experiment=x", f"data={inputs['sft']}",
            "storage_root=runs", "cpu_threads=1", "trainer.max_steps=2", "trainer.save_steps=1",
            "trainer.per_device_train_batch_size=4"]
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))  # noqa: E731 (adapter: 630 kB)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=work, preexec_fn=limit,
                          env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert last.startswith("playpen: error: cannot write into ") and "(File too large); free space" in last, last


@pytest.mark.parametrize("home_dir", ["a-file", "/sys/playpen-home"])  # a file; a folder nothing is written to
def test_an_unusable_playpen_home_is_one_line(capsys, tmp_path, monkeypatch, home_dir):
    from playpen.models import ensure_packaged_weights
    from playpen.model_registry import SMOL_MODEL, resolve_model

    if home_dir == "a-file":
        home_dir = str(tmp_path / "a-file")
        Path(home_dir).write_text("")
    monkeypatch.setenv("PLAYPEN_HOME", home_dir)
    with pytest.raises(PlaypenError, match=rf"^cannot make {SMOL_MODEL} in {home_dir}/models \(.*\); set "
                                           rf"\$PLAYPEN_HOME to a writable folder$"):
        ensure_packaged_weights(resolve_model(SMOL_MODEL))


def test_a_reward_model_killed_during_the_final_save_measures_without_training(capsys, work):
    """The reward recipe finishes in its own fit (held-out accuracy, score format): from the last checkpoint too."""
    import shutil

    from playpen.train import train

    rows = [{"prompt": f"Describe thing {i % 2}.", "text": text, "label": label}
            for i in range(6) for text, label in (("lovely and bright", 1.0), ("awful and grim", -1.0))]
    (work / "labelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["storage_root=runs", "cpu_threads=1", "experiment=rm", "data=labelled.jsonl", "held_out=0.25",
            "run_id=r1", "trainer.max_steps=2", "trainer.save_steps=2", "trainer.per_device_train_batch_size=4"]
    run = train("reward", None, argv).path
    adapter = (run / "final" / "adapter_model.safetensors").read_bytes()
    for leftover in ("finished.json", "model_registry.json", "reward_eval.json"):
        (run / leftover).unlink()
    shutil.rmtree(run / "final")
    capsys.readouterr()
    train("reward", None, argv)
    assert "checkpoint-2 is the last step (2); finishing" in capsys.readouterr().out
    assert json.loads((run / "finished.json").read_text())["global_step"] == 2
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == 2
    assert (run / "final" / "adapter_model.safetensors").read_bytes() == adapter
    assert json.loads((run / "reward_eval.json").read_text())["held_out_pairs"] > 0
