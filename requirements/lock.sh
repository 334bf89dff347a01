#!/usr/bin/env bash
# `make lock`: re-resolve requirements/lock.txt from pyproject.toml's ranges, then derive everything that must
# agree with it: requirements/tools.txt (the uv that resolved it), requirements/cpu.txt (the lock minus CUDA-only
# wheels, installed by the venv) and containers/playpen{,-cpu}.def (rendered from containers/playpen.def.in).
# uv keeps the lock's current pins unless a range excludes them; to move versions pass uv's own flags, e.g.
#   bash requirements/lock.sh --upgrade-package transformers      or      bash requirements/lock.sh --upgrade
# The resolution targets the cluster (Linux x86_64, glibc 2.28+, Python 3.11), not this machine, so torch comes
# with its CUDA runtime wheels even where there is no GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
uv=${UV:-$( [ -x .venv/bin/uv ] && echo .venv/bin/uv || command -v uv || true )}
python=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
if [ -z "$uv" ]; then
    echo "lock.sh: uv not found: run \`make setup\` (the venv has it) or pip install uv" >&2
    exit 127
fi
"$uv" pip compile pyproject.toml --extra dev --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    -o requirements/lock.txt "$@" >/dev/null  # uv also prints the lock; the file is what counts
{
    echo "# Written by requirements/lock.sh: the uv that resolved lock.txt, which the images install Python and the lock with."
    echo "uv==$("$uv" --version | awk '{print $2}')"
} > requirements/tools.txt
"$python" -m playpen.containers render
