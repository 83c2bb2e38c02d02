#!/usr/bin/env bash
# Build the gpu-autoscaler container image without a container registry or daemon:
#   1. a Debian bookworm root filesystem with python3 (mmdebstrap, minbase, no docs), imported as a base image;
#   2. the Dockerfile built on it with buildah in chroot isolation (BASE_IMAGE build argument).
# usage: scripts/build-image.sh [IMAGE]   (default ghcr.io/gpu-autoscaler/gpu-autoscaler:<pyproject version>)
# Environment:
#   DEBIAN_MIRROR       Debian mirror for the base (default http://deb.debian.org/debian)
#   STORAGE_DRIVER      buildah storage driver (default vfs: works inside containers and without fuse)
#   IMAGE_ARCHIVE       also write the image here as an OCI archive (for `skopeo copy`/`podman load`)
# Installs buildah and mmdebstrap with apt-get when missing and running as root. Prints the image and its size.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/pyproject.toml")"
IMAGE="${1:-ghcr.io/gpu-autoscaler/gpu-autoscaler:$VERSION}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
BASE="localhost/gpu-autoscaler-base:bookworm"

die() { echo "build-image: $*" >&2; exit 1; }

if ! command -v buildah >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
    [[ "$(id -u)" -eq 0 ]] || die "buildah and mmdebstrap are needed: sudo apt-get install buildah mmdebstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah mmdebstrap uidmap >/dev/null
fi

work="$(mktemp -d)"
container=""
cleanup() {
    [[ -n "$container" ]] && buildah rm "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# 1. The base: python3 (with venv for the build stage) and CA certificates; no compiler, no documentation.
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$work/base.tar" "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    || die "mmdebstrap could not build the Debian base from $MIRROR"
container="$(buildah from scratch)"
mountpoint="$(buildah mount "$container")"
tar -x -C "$mountpoint" -f "$work/base.tar"
buildah umount "$container" >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$container"
buildah commit --quiet --rm "$container" "$BASE" >/dev/null
container=""

# 2. The image. pip in the build stage trusts what this machine trusts (a TLS-inspecting proxy's CA, say):
# the host's CA bundle is mounted for the build's RUN steps only, never copied into a layer.
mounts=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    mounts=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
fi
buildah bud --quiet --isolation chroot --layers=false "${mounts[@]}" \
    --build-arg "BASE_IMAGE=$BASE" --tag "$IMAGE" --file "$REPO_ROOT/Dockerfile" "$REPO_ROOT" >/dev/null
buildah rmi "$BASE" >/dev/null 2>&1 || true

if [[ -n "${IMAGE_ARCHIVE:-}" ]]; then
    buildah push --quiet "$IMAGE" "oci-archive:$IMAGE_ARCHIVE:$IMAGE"
fi
echo "image: $IMAGE ($(buildah images --format '{{.Size}}' "$IMAGE" | head -n1))"
