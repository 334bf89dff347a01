"""Step 3 of `playpen submit`: hand the rendered job to submitit, from a clean environment, and record the
submission next to the results (what `playpen submit status|logs` and --wait read: watch.py).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from playpen.storage import make_private_folder, open_append
from playpen.submit.plan import Launch, Plan
from playpen.submit.profiles import ClusterProfile
from playpen.submit.render import Executors
from playpen.submit.watch import Submission, record_submission

# The submitting shell's variables a job inherits: an allow-list of what the toolchain, the libraries and the
# cluster's module system read. A deny-list of credential patterns always misses one (SSHPASS, *_PAT, *_CREDS,
# DATABASE_URL); anything else reaches a job only when the profile lists it in `env_keep`.
INHERITED_ENV_NAMES = frozenset((
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "PWD", "HOSTNAME",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PKG_CONFIG_PATH", "MANPATH", "VIRTUAL_ENV", "MODULEPATH",
    "MODULESHOME", "LOADEDMODULES", "_LMFILES_", "SLURM_CONF", "TOKENIZERS_PARALLELISM", "MPLBACKEND",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "OMPI_MCA_btl"))
INHERITED_ENV_PREFIXES = ("LC_", "XDG_", "PLAYPEN_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_",
                          "CUDA_", "CUDNN_", "NVIDIA_", "NCCL_", "OMP_", "MKL_", "OPENBLAS_", "PYTHON", "CONDA",
                          "APPTAINER", "SINGULARITY", "LMOD_", "TRITON_", "DS_", "ACCELERATE_", "BASH_FUNC_")
# ... minus those that would mislead a job (a job submitted from a job would inherit its rank or GPUs) and any
# allowed name that still looks like a credential (HF_TOKEN, HUGGINGFACE_HUB_TOKEN)
DROPPED_ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)
SECRET_PATTERN = re.compile(r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|PAT|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|KEY|"
                            r"CREDENTIALS?|CREDS|AUTH)(?:_|$)"
                            # long words anywhere in a name (HF_AUTHTOKEN, PYTHONSECRET), and URLs (PLAYPEN_DB_URL)
                            r"|TOKEN(?!IZERS_PARALLELISM)|SECRET|PASSWORD|PASSWD|APIKEY|CREDENTIAL|AUTH|SIGN|_URL$|_DSN$",
                            re.I)
SECRET_VALUE = re.compile(r"://[^/@\s]*:[^/@\s]*@|[?&](?:sig|signature|token|key|x-amz-signature|auth)=", re.I)


def make_job_folder(plan: Plan) -> Path:
    """The job's folder (its pickles and logs): new, private (0700), under real folders inside the run's
    directory. The job loads its pickle only from such a folder (start.py). Made before the executors are
    rendered, since submitit's executors make their folder when built."""
    return make_private_folder(plan.launch.folder, "job folder", root=plan.directory)


def send(plan: Plan, executors: Executors) -> tuple[Submission, list]:
    """Submit from a clean environment and record the submission next to the results."""
    folder = plan.launch.folder  # (made by make_job_folder)
    after = []
    with submission_env(plan.launch, folder / "local-controller.log"):
        ex = executors.job
        if plan.array is None:
            submitted = [ex.submit(plan.job)]
        elif plan.launch.executor == "slurm":  # one job array: one sbatch for all cells
            submitted = ex.map_array(plan.job, plan.array)
        else:  # local: `array_parallelism` worker processes share the cells
            submitted = [ex.submit(plan.job, cells) for cells in plan.array]
        if plan.aggregate is not None and executors.after is not None:  # aggregate once the whole array has ended
            executors.after.update_parameters(dependency=f"afterany:{submitted[0].job_id.split('_')[0]}")
            after.append(executors.after.submit(*plan.aggregate).job_id)
    launch = plan.launch
    sub = Submission(kind=plan.kind, what=plan.command, executor=launch.executor, profile=launch.profile.name,
                     job_ids=[j.job_id for j in submitted], folder=str(folder), directory=str(plan.directory),
                     tasks=1 if plan.array is not None else launch.tasks,
                     max_requeues=launch.profile.max_requeues, argv=sys.argv[:],
                     time=time.strftime("%Y-%m-%dT%H:%M:%S"), after=after)
    record_submission(sub)
    return sub, submitted


def job_submission_env(environ: dict[str, str], profile: ClusterProfile) -> dict[str, str]:
    """The submitting shell's variables a job may inherit: the allow-list (INHERITED_ENV_*) without credential-like
    names, plus the profile's `env_keep`. SLURM's and torch.distributed's own are not on it."""
    keep = set(profile.env_keep)

    def inherited(name: str) -> bool:
        if name in keep:
            return True
        allowed = name in INHERITED_ENV_NAMES or name.startswith(INHERITED_ENV_PREFIXES)
        return allowed and name not in DROPPED_ENV_NAMES and not SECRET_PATTERN.search(name) \
            and not SECRET_VALUE.search(environ[name])  # (a password in a URL, a signed URL's signature)

    return {k: v for k, v in environ.items() if inherited(k)}


@contextlib.contextmanager
def submission_env(launch: Launch, output: Path | None = None) -> Iterator[None]:
    """While submitting, the process environment holds only what a job may inherit (sbatch exports it all;
    the local executor copies it): no SLURM_*/SBATCH_* of the submitting shell, no secrets.

    Local jobs also get the job's variables here (expanded now), and `output` (a file in the folder `send` made
    and checked under the run's root) replaces the stdout/stderr that the job's controller process would
    otherwise inherit: a job running in the background must not hold the submitting terminal's pipe open
    (`out=$(python -m playpen.submit ...)`)."""
    saved = dict(os.environ)
    clean = job_submission_env(saved, launch.profile)
    local = launch.executor == "local"
    if local:
        clean.update({k: os.path.expandvars(v) for k, v in launch.exports.items()})
    os.environ.clear()
    os.environ.update(clean)
    try:
        with contextlib.ExitStack() as stack:
            if local and output is not None:
                stack.enter_context(_redirected_output(output))
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _redirected_output(path: Path) -> Iterator[None]:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = open_append(path, "job log")
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
