#!/usr/bin/env bash
# Builds the Kubernetes job image (Dockerfile beside this file) from this checkout, with no network at
# build time: the wheels are fetched first, on this machine, into CONTEXT/wheelhouse (kept: a second
# build fetches nothing new, and docker reuses the dependencies' layers while only the project changes).
#
#   profiles/kubernetes/image/build.sh TAG [BASE] [CONTEXT]
#     TAG      the image's name, e.g. ghcr.io/YOUR_ORG/contextuality:0.1 (then docker push it)
#     BASE     the base image (default python:3.11-slim-bookworm; it needs Python 3.11 and venv)
#     CONTEXT  the build folder (default .image-context in the project, git-ignored)
#   TORCH: torch==2.13.0 by default, the CPU build. On a GPU cluster give a CUDA build and its index,
#   e.g. TORCH=torch==2.13.0 PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cu128.
#   PYTHON: the python (3.11, with pip) that fetches the wheels; default python3. Give the one you launch
#   snakemake with: every storage plugin installed beside it is installed by each pod, so the image holds them.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PROJECT="$(cd "$HERE/../../.." && pwd)"
TAG="${1:?usage: build.sh TAG [BASE] [CONTEXT]}"
BASE="${2:-python:3.11-slim-bookworm}"
CONTEXT="${3:-$PROJECT/.image-context}"
PY="${PYTHON:-python3}"
mkdir -p "$CONTEXT/wheelhouse"
rm -rf "$CONTEXT/project" && mkdir "$CONTEXT/project"
cp "$HERE/Dockerfile" "$CONTEXT/Dockerfile"
cp "$PROJECT/envs/constraints.txt" "$CONTEXT/wheelhouse/constraints.txt"
# Every pod pip-installs every storage plugin installed where snakemake is launched, not only the one it
# uses (Snakemake's auto_deploy_default_storage_provider): the image carries them all, the S3 one always.
"$PY" - > "$CONTEXT/wheelhouse/storage-plugins.txt" <<'PYEOF'
from importlib import metadata
names = {(dist.metadata["Name"] or "").lower().replace("_", "-") for dist in metadata.distributions()}
print("\n".join(sorted({name for name in names if name.startswith("snakemake-storage-plugin-")}
                       | {"snakemake-storage-plugin-s3"})))
PYEOF
# the project's dependencies (pyproject.toml), torch, and those storage plugins
"$PY" - "$PROJECT/pyproject.toml" "${TORCH:-torch==2.13.0}" "$CONTEXT/wheelhouse/storage-plugins.txt" \
  > "$CONTEXT/wheelhouse/requirements.txt" <<'PYEOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join([sys.argv[2], *project["dependencies"], *open(sys.argv[3]).read().split()]))
PYEOF
"$PY" -m pip wheel --quiet --find-links "$CONTEXT/wheelhouse" -w "$CONTEXT/wheelhouse" \
  -r "$CONTEXT/wheelhouse/requirements.txt" -c "$PROJECT/envs/constraints.txt"
# The project's wheel, built from a clean copy of its files (tracked, and untracked not ignored) when it is
# a git checkout: an in-place build reuses setuptools' build/ folder, which keeps modules deleted since.
# The same sources give the same wheel (no file times), so docker's cache sees an unchanged project.
SOURCE="$PROJECT"
if git -C "$PROJECT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  SOURCE="$(mktemp -d)"
  trap 'rm -rf "$SOURCE"' EXIT
  (cd "$PROJECT" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' path; do [ -e "$path" ] || [ -L "$path" ] && printf '%s\0' "$path"; done |
    tar --null -T - -c) | tar -C "$SOURCE" -x
fi
SOURCE_DATE_EPOCH=315532800 "$PY" -m pip wheel --quiet --no-deps -w "$CONTEXT/project" "$SOURCE"
# --network none: the Dockerfile installs from the context only
docker build --network none --build-arg BASE="$BASE" -t "$TAG" "$CONTEXT"
echo "built $TAG from $BASE, storage plugins $(paste -sd, "$CONTEXT/wheelhouse/storage-plugins.txt"): $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')"
