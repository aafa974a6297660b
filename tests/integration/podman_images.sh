#!/usr/bin/env bash
# What tests/integration/test_compose_podman.py builds its images from, made once by
# install.sh (the test itself reaches no registry and nothing off this machine):
#   .cache/compose/debian-rootfs.tar   Debian bookworm (minbase) with python3, pip and venv, laid
#                                      out as the python:3.11-slim image the Dockerfile starts
#                                      FROM (python and pip on /usr/local/bin, pip free to
#                                      install), and systemd, which the systemd test boots
#   .cache/compose/wheelhouse/         the project's dependencies and its build backend as
#                                      wheels, for the Dockerfile's `pip install .` (offline)
# No registry is reachable here (no docker.io), so these stand in for the base images.
# Needs root (debootstrap); the Debian mirror is $HOOKAUDIT_DEBIAN_MIRROR or deb.debian.org.
# Idempotent. Usage: tests/integration/podman_images.sh [rootfs|wheels|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.cache/compose
what=${1:-all}
mkdir -p "$out"

if [ "$what" != wheels ] && [ ! -f "$out/debian-rootfs.tar" ]; then
  mirror=${HOOKAUDIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  work=$(mktemp -d "$out/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,systemd,systemd-sysv bookworm "$work/root" "$mirror" \
    > "$out/debootstrap.log" 2>&1 || { tail -5 "$out/debootstrap.log" >&2; exit 1; }
  r=$work/root
  # python:3.11-slim's layout: `python` and `pip` on PATH, and pip installs into the image
  # (Debian's PEP 668 marker would refuse the Dockerfile's `pip install .`).
  rm -f "$r"/usr/lib/python3*/EXTERNALLY-MANAGED
  ln -sf /usr/bin/python3 "$r/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$r/usr/local/bin/pip"
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*
  tar -C "$r" -cf "$out/debian-rootfs.tar.part" .
  mv "$out/debian-rootfs.tar.part" "$out/debian-rootfs.tar"
fi

if [ "$what" != rootfs ] && [ ! -f "$out/wheelhouse/.complete" ]; then
  # What `pip install .` needs in the image: the build backend and every runtime dependency.
  backend=$(.venv/bin/python -c 'import tomllib;print(" ".join(tomllib.load(open("pyproject.toml","rb"))["build-system"]["requires"]))')
  # shellcheck disable=SC2086
  if ! .venv/bin/python -m pip download --dest "$out/wheelhouse" . $backend \
      > "$out/wheels.log" 2>&1; then
    tail -5 "$out/wheels.log" >&2
    exit 1
  fi
  touch "$out/wheelhouse/.complete"
fi
