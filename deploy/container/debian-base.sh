#!/bin/sh
# Makes a Debian bookworm base image where no registry serves one (only Debian's mirror):
#   debootstrap --variant=minbase bookworm DIR; tar -C DIR -c . | podman import - NAME
# ~1 min and ~206 MB. Needs root and debootstrap (apt-get install debootstrap).
#   deploy/container/debian-base.sh [NAME]   (NAME: localhost/debian-base:bookworm)
set -eu
NAME=${1:-localhost/debian-base:bookworm}
ENGINE=${ENGINE:-podman}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" != 0 ]; then
  echo "debian-base.sh: debootstrap needs root; or build with IMAGE_BASE=debian:bookworm-slim" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "debian-base.sh: debootstrap is missing: apt-get install debootstrap" >&2
  exit 1
fi
root=$(mktemp -d /tmp/modelswap-debian-base.XXXXXX)
trap 'rm -rf "$root"' EXIT INT TERM
echo "debootstrap: Debian bookworm (minbase) into $root"
debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# What debootstrap leaves behind: downloaded packages, package lists, apt's caches (~90 MB).
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/cache/apt/"*.bin "$root/var/lib/apt/lists/"*
tar -C "$root" -c . | "$ENGINE" import - "$NAME" >/dev/null
echo "imported $NAME"
