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
target=(--python-version 3.11 --python-platform x86_64-manylinux_2_28)
# requirements/no-deps.in: wheels installed without dependencies (see there) are pinned alone, with --no-deps,
# keeping the lock's current pins like the main resolution does, and appended to the lock.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp requirements/lock.txt "$tmp/no-deps.txt" 2>/dev/null || true
"$uv" pip compile pyproject.toml --extra dev --extra trackers "${target[@]}" \
    -o requirements/lock.txt "$@" >/dev/null  # uv also prints the lock; the file is what counts
"$uv" pip compile requirements/no-deps.in --no-deps --no-header "${target[@]}" -o "$tmp/no-deps.txt" "$@" >/dev/null
{
    echo "# Installed with --no-deps (requirements/no-deps.in), resolved by: uv pip compile requirements/no-deps.in --no-deps"
    cat "$tmp/no-deps.txt"
} >> requirements/lock.txt
{
    echo "# Written by requirements/lock.sh: the uv that resolved lock.txt, which the images install Python and the lock with."
    echo "uv==$("$uv" --version | awk '{print $2}')"
} > requirements/tools.txt
"$python" -m playpen.containers render
