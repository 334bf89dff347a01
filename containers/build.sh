#!/usr/bin/env bash
# `make image`: build the Apptainer image from the generated def (containers/playpen.def, or playpen-cpu.def).
#
#   bash containers/build.sh [gpu|cpu] [--notest]
#
#   PLAYPEN_IMAGE=path                output image (default containers/playpen.sif or containers/playpen-cpu.sif)
#   TORCH_CUDA_ARCH_LIST="8.0;9.0"    GPUs DeepSpeed's ops are compiled for (default: the def's %arguments)
#
# %test runs at the end of the build unless --notest: it needs no GPU (the CUDA check runs only where one is
# visible), so a GPU-less build host still proves that every pinned package imports. Run `apptainer test --nv`
# on a GPU node for the CUDA part.
set -euo pipefail
here=${BASH_SOURCE[0]%/*}
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.  # run as `bash build.sh` from containers/
cd "$here/.."

variant=gpu
notest=()
for arg in "$@"; do
    case $arg in
        gpu | cpu) variant=$arg ;;
        --notest) notest=(--notest) ;;
        *) echo "build.sh: unknown argument '$arg' (expected gpu, cpu or --notest)" >&2; exit 2 ;;
    esac
done
def=containers/playpen.def
[ "$variant" = cpu ] && def=containers/playpen-cpu.def
image=${PLAYPEN_IMAGE:-${def%.def}.sif}

runtime=$(command -v apptainer || command -v singularity || true)
if [ -z "$runtime" ]; then
    echo "build.sh: neither apptainer nor singularity is on PATH: install Apptainer >= 1.2 (https://apptainer.org/docs/admin/main/installation.html, or \`module load apptainer\` on a cluster) and build $def there" >&2
    exit 127
fi

# Refuse to build from a def that no longer matches requirements/lock.txt (needs the venv's Python).
python=${PYTHON:-.venv/bin/python}
if [ -x "$python" ]; then
    "$python" -m playpen.containers check || { echo "build.sh: $def is stale: run \`make lock\`" >&2; exit 1; }
fi

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then
    commit=$commit-dirty  # the label must not claim a commit the image's playpen/ differs from
fi
build_args=(--build-arg "GIT_COMMIT=$commit")
if [ "$variant" = gpu ] && [ -n "${TORCH_CUDA_ARCH_LIST:-}" ]; then
    build_args+=(--build-arg "TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST")
fi
fakeroot=()
[ "$(id -u)" -ne 0 ] && fakeroot=(--fakeroot)  # root builds directly; everyone else needs subuid mappings

mkdir -p "$(dirname "$image")"
cmd=("$runtime" build --force "${fakeroot[@]}" "${notest[@]}" "${build_args[@]}" "$image" "$def")
echo "build.sh: ${cmd[*]}"
"${cmd[@]}"
echo "image: $image ($(du -h "$image" | cut -f1))"
