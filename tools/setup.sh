#!/usr/bin/env bash
# Installs every Debian package that hcomm's build, tests and examples need.
# Idempotent: when everything is present it only checks, quietly, and returns.
set -euo pipefail

PKGS=(
  bazel-bootstrap bazel-rules-cc bazel-rules-java bazel-rules-proto
  bazel-platforms bazel-skylib
  g++ libabsl-dev libgtest-dev libprotobuf-dev protobuf-compiler
  libssl-dev libibverbs-dev pkg-config iproute2 procps
  swig python3-dev python3-numpy default-jdk-headless junit4 golang-go
  clang libclang-rt-14-dev
  nlohmann-json3-dev python3-torch
  chromium libzstd-dev python3-jsonschema
  libxxhash-dev
  libhwloc-dev slurmd slurmctld slurm-client munge
  nftables faketime
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "hcomm setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
