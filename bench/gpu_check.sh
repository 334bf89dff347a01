#!/usr/bin/env bash
# The GPU proof on one GPU node with no internet and only a stock CUDA PyTorch environment (torch, transformers,
# peft, accelerate): install the carried wheels without network, then bench/gpu_check.py (playpen doctor, GRPO and
# SFT-LoRA on playpen-tiny killed and resumed, the rollout engine against generate and a raw loop on a random ~1B
# Llama) writes bench/results/gpu-<device>.md. About 8 minutes on one H100.
#
#   python bench/gpu_wheels.py fetch          # here, with internet: the wheels into bench/wheels/ (git-ignored)
#   bash bench/gpu_check.sh                   # there: bench/wheels/ must travel with the checkout
#   bash bench/gpu_check.sh --dry-run         # the CPU part, small (tests/test_gpu_check.py runs it)
#
# Wheels go to a --target folder on PYTHONPATH, --no-deps and --no-index; a distribution the node already has is
# left alone (torch above all: its CUDA build must match the driver). What did not fit the wheel budget is listed
# in bench/wheels/LEFT_OUT.txt, and the phases that need it fail in the report, naming it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${PYTHON:-python3}
dry=()
results=bench/results
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=(--dry-run) ;;
        --results) results=$2; shift ;;
        *) echo "gpu_check.sh: unknown argument $1 (--dry-run, --results DIR)" >&2; exit 2 ;;
    esac
    shift
done
work=${GPU_CHECK_WORK:-$(mktemp -d /tmp/playpen-gpu-check.XXXXXX)}
site="$work/site"
log="$work/install.log"
mkdir -p "$site"
: > "$log"
# the files whose distribution the node does not have yet (the name as the file spells it, before the version)
missing=$("$python" - bench/wheels <<'PY'
import importlib.metadata as md, pathlib, re, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*")):
    if not path.name.endswith((".whl", ".tar.gz")):
        continue
    name = re.sub(r"-[0-9].*$", "", path.name)
    try:
        print(f"kept the node's {name} {md.version(name)}", file=sys.stderr)
    except md.PackageNotFoundError:
        print(path)
PY
) 2>> "$log"
for wheel in $missing; do
    if [ ${#dry[@]} -gt 0 ]; then
        echo "would install $(basename "$wheel")" >> "$log"
    elif DS_BUILD_OPS=0 "$python" -m pip install -q --no-index --no-deps --no-build-isolation --target "$site" "$wheel" >> "$log" 2>&1; then
        echo "installed $(basename "$wheel")" >> "$log"
    else
        echo "FAILED to install $(basename "$wheel")" >> "$log"
    fi
done
[ -s bench/wheels/LEFT_OUT.txt ] && sed 's/^/not carried (over the budget): /' bench/wheels/LEFT_OUT.txt >> "$log"
[ -s "$log" ] || echo "no carried wheels in bench/wheels/ (python bench/gpu_wheels.py fetch makes them)" >> "$log"
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$site/bin:$PATH"
exec "$python" bench/gpu_check.py "${dry[@]}" --work "$work" --results "$results" --install-log "$log"
