"""playpen submit's checks before a job is sent: cluster profiles, trainer keys, key.json and eval job specs."""
from __future__ import annotations

import pytest

from playpen.cli import main
from tests.helpers import check_refused, snapshot

SUBMIT = ["submit", "sft", "--config", "sft.yaml", "--executor", "local", "--dry-run"]
SUBMIT_GRPO = ["submit", "grpo", "--config", "grpo.yaml", "--executor", "local", "--dry-run"]
SUBMIT_EVAL = ["submit", "eval", "--config", "e.yaml", "--executor", "local", "--dry-run"]


def profile(**values) -> str:
    return "".join(f"{k}: {v}\n" for k, v in {"time": 60, **values}.items())


JOBS = {  # name: (argv, files, what the line says)
    "profile max_nodes 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_nodes=0)},
                            "p.yaml: max_nodes: must be at least 1, got 0"),
    "profile max_nodes -1": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_nodes=-1)},
                             "p.yaml: max_nodes: must be at least 1, got -1"),
    "profile max_nodes abc": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_nodes="abc")},
                              "p.yaml: max_nodes: expected int, got 'abc'"),
    "profile array_parallelism 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(array_parallelism=0)},
                                    "array_parallelism: must be at least 1, got 0"),
    "profile max_requeues -1": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(max_requeues=-1)},
                                "max_requeues: must be at least 0, got -1"),
    "profile gpus_per_node -2": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(gpus_per_node=-2)},
                                 "gpus_per_node: must be at least 0, got -2"),
    "profile cpus_per_task 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(cpus_per_task=0)},
                                "cpus_per_task: must be at least 1, got 0"),
    "profile signal_delay_s -5": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(signal_delay_s=-5)},
                                  "signal_delay_s: must be at least 0, got -5"),
    "profile time 0": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(time=0)}, "time: must be positive"),
    "profile a folder": (SUBMIT + ["--cluster", "folder/p.yaml"], {"folder/p.yaml/x": "x"},
                         "cluster profile folder/p.yaml is a folder, not a file"),
    "profile binary": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": b"\xff\xfe\x00"},
                       "cluster profile p.yaml is not a text file"),
    "profile missing": (SUBMIT + ["--cluster", "nope.yaml"], {}, "cluster profile file nope.yaml not found"),
    # trainer keys and key.json: refused before a job is sent, not when it starts
    "train job: learning_rate abc": (SUBMIT + ["trainer.learning_rate=abc"], {},
                                     "sft.yaml: trainer.learning_rate: expected float, got 'abc'"),
    "train job: max_steps 0": (SUBMIT + ["trainer.max_steps=0"], {}, "trainer.max_steps: must be at least 1"),
    "train job: group_size 1": (SUBMIT_GRPO + ["group_size=1"], {}, "grpo.yaml: group_size: must be at least 2"),
    "train job: teacher without key": (SUBMIT_GRPO + ["partner=gpt-4o-mini"], {},
                                       "partner 'gpt-4o-mini' uses the remote backend 'openai' but key.json has no"),
    "train job: key.json broken": (SUBMIT_GRPO + ["partner=gpt-4o-mini"], {"key.json": "{"},
                                   "key.json:1:2: malformed JSON"),
    "train job: teacher a project folder": (SUBMIT_GRPO + ["partner=project"], {},
                                            "project is a folder with a model registry (mine), not a model"),
    # eval job specs: evaluate()'s arguments, in the ranges of `playpen eval`'s flags
    "eval job: temperature nan": (SUBMIT_EVAL,
                                  {"e.yaml": "model: playpen-tiny\ntemperature: .nan\n"},
                                  "e.yaml: temperature: must be a finite number, got nan"),
    "eval job: max_new_tokens 0": (SUBMIT_EVAL,
                                   {"e.yaml": "model: playpen-tiny\nmax_new_tokens: 0\n"},
                                   "max_new_tokens: must be at least 1"),
    "eval job: batch_size 0": (SUBMIT_EVAL,
                               {"e.yaml": "model: playpen-tiny\nbatch_size: 0\n"}, "batch_size: must be at least 1"),
    "eval job: instances -1": (SUBMIT_EVAL,
                               {"e.yaml": "model: playpen-tiny\ninstances: -1\n"}, "instances: must be at least 1"),
    "eval job: partner in a one-player game": (
        SUBMIT_EVAL,
        {"e.yaml": "model: playpen-tiny\npartner: mock\ngames: [arithmetic]\n"},
        "a partner plays the second seat of two-player games (as `clem run -m MODEL PARTNER`); arithmetic has 1"),
    "eval job: unknown partner": (SUBMIT_EVAL,
                                  {"e.yaml": "model: playpen-tiny\npartner: nope-model\ngames: [taboo]\n"},
                                  "e.yaml: unknown model 'nope-model'"),
    "eval job: partner without key": (SUBMIT_EVAL,
                                      {"e.yaml": "model: playpen-tiny\npartner: gpt-4o-mini\ngames: [taboo]\n"},
                                      "partner 'gpt-4o-mini' uses the remote backend 'openai' but key.json has no"),
    # values that reach the job script where the container runtime or sbatch reads options
    "profile image an option": (SUBMIT + ["--cluster", "p.yaml"],
                                {"p.yaml": profile() + "container:\n  image: --bind=/:/host\n"},
                                "container.image: '--bind=/:/host' starts with '-'"),
    "profile python an option": (SUBMIT + ["--cluster", "p.yaml"],
                                 {"p.yaml": profile() + "container:\n  image: x.sif\n  python: -c\n"},
                                 "container.python: '-c' starts with '-'"),
    "--container an option": (SUBMIT + ["--container=-B/:/host"], {}, "--container: '-B/:/host' starts with '-'"),
    "profile sbatch key in capitals": (SUBMIT + ["--cluster", "p.yaml"],
                                       {"p.yaml": profile() + "sbatch:\n  Partition: other\n"},
                                       "'Partition' is not an sbatch option name (a lowercase word"),
    "profile env sets the storage": (SUBMIT + ["--cluster", "p.yaml"],
                                     {"p.yaml": profile() + "env:\n  PLAYPEN_STORAGE: /elsewhere\n"},
                                     "env: PLAYPEN_STORAGE is set by playpen in every job; use storage_root:"),
    "profile signal after the start": (SUBMIT + ["--cluster", "p.yaml"], {"p.yaml": profile(signal_delay_s=7200)},
                                       "signal_delay_s 7200 is not below the job's time limit (60 min = 3600 s)"),
    "eval job: a mapping with an unsafe model_name": (
        SUBMIT_EVAL, {"e.yaml": "model: {model_name: ../../x, backend: mock}\n"},
        "model name '../../x' cannot name a results folder"),
    "eval job: results_dir a name too long": (
        SUBMIT_EVAL, {"e.yaml": f"model: playpen-tiny\nresults_dir: {'r' * 300}\n"},
        "has a name of 300 bytes, above the 255 a file system allows"),
}


@pytest.mark.parametrize("case", JOBS)
def test_jobs(capsys, stocked_cwd, case):
    argv, files, message = JOBS[case]
    check_refused(capsys, stocked_cwd, argv, message, files)


# ---------------------------------------------------------------- warned, not refused

def test_dry_run_with_a_missing_image_warns_and_prints_the_script(capsys, stocked_cwd):
    before = snapshot(stocked_cwd)
    capsys.readouterr()
    assert main(["submit", "sft", "--config", "sft.yaml", "--container", "/missing.sif", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == ("playpen: warning: container image /missing.sif not found here; the script names it "
                           "(build it with `make image`, or pass --container none)")
    assert "#SBATCH" in out and "/missing.sif" in out
    assert snapshot(stocked_cwd) == before


def test_an_eval_job_of_a_model_mapping_is_submittable(capsys, stocked_cwd):
    """`model:` as a ModelSpec mapping (evaluate's documented form) names the default results folder by its
    model_name."""
    (stocked_cwd / "e.yaml").write_text("model: {model_name: my-mock, backend: mock}\ngames: [taboo]\n")
    capsys.readouterr()
    assert main(SUBMIT_EVAL) == 0
    assert "/eval/my-mock-" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["cwd", "home"])
def test_the_working_directory_and_home_are_checked_as_the_job_script_gets_them(capsys, tmp_path, monkeypatch,
                                                                                where):
    """A relative results_dir gets the working directory in front, `~` gets $HOME: a newline or a % there would
    become a line of the job script (or an sbatch pattern). Refused naming the expanded value; the script is
    never printed."""
    folder = tmp_path / "c\n%x"
    folder.mkdir()
    (folder / "e.yaml").write_text(f"model: playpen-tiny\nresults_dir: {'res' if where == 'cwd' else '~/res'}\n")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("PLAYPEN_STORAGE", str(tmp_path / "runs"))  # (./runs would be refused first)
    capsys.readouterr()
    assert main(["submit", "eval", "--config", str(folder / "e.yaml"), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert "results_dir: path" in err and "with ~ and the working directory filled in" in err, err
    assert "#SBATCH" not in out and not (folder / "res").exists()


def test_an_image_under_home_reaches_the_script_as_the_submission_checked_it(capsys, stocked_cwd):
    home = stocked_cwd.parent / "user"
    home.mkdir(exist_ok=True)
    (home / "p.sif").write_bytes(b"image")
    capsys.readouterr()
    assert main(["submit", "sft", "--config", "sft.yaml", "--container", "~/p.sif", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f" {home / 'p.sif'} python" in out and "~/p.sif" not in out, out
