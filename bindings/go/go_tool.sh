#!/usr/bin/env bash
# Build steps of the Go binding, run by the genrules of
# tools/bzl/hcomm_go.bzl (rules_go is not available offline).
#
#   go_tool.sh pack OUT.tar DEST=SRC...
#       The installable package tree (what DIR/go/hcomm holds) as a
#       deterministic tar: each SRC file is stored as DEST.
#   go_tool.sh test OUT PKG.tar LIB.so HEADER SRC...
#       `go test -c`: the package of PKG.tar plus the _test.go files SRC.
#   go_tool.sh binary OUT PKG.tar LIB.so HEADER SRC...
#       `go build` of the main package SRC, importing hcomm.local/hcomm.
#
# test/binary lay out the installed tree in a scratch folder
# (include/hcomm/hcomm.h, lib/libhcomm_c.so, go/hcomm/), so the cgo flags of
# internal/capi/cgo.go work unchanged; the build tag hcomm_bazel swaps the
# installed RUNPATH for $ORIGIN/<path from OUT to LIB>, valid in bazel-bin
# and in runfiles. The Go build cache persists in /tmp/hcomm-go-cache-UID
# (a private folder; a temporary one if that is not safe to use): the cache
# is keyed by content, and it takes a rebuild from ~10 s to ~1 s.
set -euo pipefail

die() {
  echo "go_tool.sh: $*" >&2
  exit 1
}

[[ $# -ge 2 ]] || die "usage: go_tool.sh pack|test|binary OUT ..."
mode="$1"
out="$2"
shift 2
out_abs="$(realpath -m -s -- "$out")"

work="$(mktemp -d "${TMPDIR:-/tmp}/hcomm-go.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

if [[ "$mode" == pack ]]; then
  tree="$work/tree"
  for pair in "$@"; do
    dest="${pair%%=*}"
    src="${pair#*=}"
    [[ -n "$dest" && "$dest" != "$pair" && -f "$src" ]] || die "bad DEST=SRC: $pair"
    install -D -m 644 -- "$src" "$tree/$dest"
  done
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u+rw,go+r,go-w \
    -cf "$out_abs" -C "$tree" .
  exit 0
fi

[[ "$mode" == test || "$mode" == binary ]] || die "unknown mode $mode"
[[ $# -ge 3 ]] || die "usage: go_tool.sh $mode OUT PKG.tar LIB.so HEADER SRC..."
pkg="$1"
lib="$2"
header="$3"
shift 3

mkdir -p "$work/include/hcomm" "$work/lib" "$work/go/hcomm"
cp -- "$header" "$work/include/hcomm/hcomm.h"
cp -- "$lib" "$work/lib/libhcomm_c.so"
tar -xf "$pkg" -C "$work/go/hcomm"

export HOME="$work" GOPATH="$work/gopath" GO111MODULE=on GOFLAGS=-mod=mod GOPROXY=off
export GOSUMDB=off GOTOOLCHAIN=local GOTELEMETRY=off CGO_ENABLED=1 CC="${CC:-gcc}"
cache="/tmp/hcomm-go-cache-$(id -u)"
if mkdir -p -m 700 "$cache" 2>/dev/null && [[ -O "$cache" && ! -L "$cache" ]] &&
   [[ "$(stat -c %a "$cache")" == 700 ]]; then
  export GOCACHE="$cache"
else
  export GOCACHE="$work/gocache"
fi
# $ORIGIN of OUT to the library, as both sit in bazel-bin (paths from the
# execution root, symlinks not resolved).
rel="$(realpath -m -s --relative-to="$(dirname "$out_abs")" "$(dirname "$(realpath -m -s -- "$lib")")")"
export CGO_LDFLAGS="-Wl,-rpath,\$ORIGIN/$rel"
flags=(-tags hcomm_bazel -trimpath)

if [[ "$mode" == test ]]; then
  cp -- "$@" "$work/go/hcomm/"
  cd "$work/go/hcomm"
  go test -c "${flags[@]}" -o "$out_abs" .
else
  mkdir -p "$work/app"
  cp -- "$@" "$work/app/"
  printf '%s\n' 'module hcomm.local/app' '' 'go 1.19' '' \
    'require hcomm.local/hcomm v0.0.0' '' 'replace hcomm.local/hcomm => ../go/hcomm' \
    >"$work/app/go.mod"
  cd "$work/app"
  go build "${flags[@]}" -buildvcs=false -o "$out_abs" .
fi
