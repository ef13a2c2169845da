#!/usr/bin/env bash
# Installs hcomm into a temporary prefix with tools/install.sh, then, using
# only that tree (no Bazel, no network: GOPROXY=off, a fresh GOPATH and
# GOCACHE): makes a Go module that requires hcomm.local/hcomm with a
# `replace` pointing at DIR/go/hcomm, builds a program (point-to-point ring,
# AllReduce, NewGroup, a stream, an expected error), checks that it finds
# DIR/lib/libhcomm_c.so through its RUNPATH, and runs it as 4 ranks with
# DIR/bin/hcomm_run.
set -uo pipefail
source "$(dirname "$0")/../acceptance/testlib.sh"

command -v go >/dev/null || fail "go is not installed (Debian golang-go)"
install_sh="$(runfile tools/install)" || fail "tools/install not in the runfiles"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/go_install.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
prefix="$work/prefix"

RUNFILES_DIR="${RUNFILES_DIR:-$TEST_SRCDIR}" "$install_sh" --prefix="$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "install.sh failed"; }
for f in go/hcomm/go.mod go/hcomm/comm.go go/hcomm/internal/capi/hcomm.go \
         go/hcomm/internal/capi/hcomm_wrap.c go/hcomm/internal/capi/cgo.go \
         include/hcomm/hcomm.h lib/libhcomm_c.so bin/hcomm_run; do
  [[ -e "$prefix/$f" ]] || fail "missing $prefix/$f"
done
if ls "$prefix"/go/hcomm/*_test.go >/dev/null 2>&1; then
  fail "test files were installed"
fi

app="$work/app"
mkdir -p "$app"
cat >"$app/main.go" <<'GO'
// A user program against the installed hcomm Go package.
package main

import (
	"errors"
	"fmt"
	"os"

	"hcomm.local/hcomm"
)

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

func main() {
	c, err := hcomm.Init(nil)
	check("Init", err)
	defer c.Close()
	rank, size := c.Rank(), c.Size()

	// Point-to-point ring: each rank sends its rank to the right.
	right, left := (rank+1)%size, (rank+size-1)%size
	req, err := hcomm.Isend(c, []int32{int32(rank)}, right, 1)
	check("Isend", err)
	got := []int32{-1}
	src, err := hcomm.Recv(c, got, hcomm.AnySource, 1)
	check("Recv", err)
	check("Wait", req.Wait())
	check("Free", req.Free())
	if src != left || got[0] != int32(left) {
		check("ring", fmt.Errorf("got %v from %d, want %d", got, src, left))
	}

	// AllReduce.
	f := []float64{float64(rank), 1}
	check("AllReduce", hcomm.AllReduce(c, f, hcomm.Sum))
	if f[0] != float64(size*(size-1)/2) || f[1] != float64(size) {
		check("AllReduce result", fmt.Errorf("%v", f))
	}

	// NewGroup of the even ranks.
	g, err := c.NewGroup([]int{0, 2})
	check("NewGroup", err)
	if (g != nil) != (rank%2 == 0) {
		check("NewGroup membership", fmt.Errorf("rank %d got group %v", rank, g))
	}
	if g != nil {
		v := []int64{int64(rank)}
		check("group AllReduce", hcomm.AllReduce(g, v, hcomm.Max))
		if v[0] != 2 || g.Size() != 2 {
			check("group result", fmt.Errorf("max %d size %d", v[0], g.Size()))
		}
		check("group Close", g.Close())
	}

	// A stream: an AllReduce queued, then synchronized.
	st, err := c.NewStream(1)
	check("NewStream", err)
	w := []int64{int64(rank + 1)}
	check("StreamAllReduce", hcomm.StreamAllReduce(st, w, hcomm.Sum))
	check("Stream.Synchronize", st.Synchronize())
	if w[0] != int64(size*(size+1)/2) {
		check("stream result", fmt.Errorf("%v", w))
	}
	check("Stream.Close", st.Close())

	// An error: a peer out of range is an *hcomm.Error, INVALID_ARGUMENT.
	err = hcomm.Send(c, []uint8{1}, size+5, 0)
	var e *hcomm.Error
	if !errors.As(err, &e) || e.Status != hcomm.StatusInvalidArgument || e.Message == "" {
		check("expected error", fmt.Errorf("got %v", err))
	}

	check("Barrier", c.Barrier())
	check("Close", c.Close())
	fmt.Printf("ok: ring, allreduce, group, stream, error (%s)\n", e.Status)
}
GO

export HOME="$work/home" GOPATH="$work/gopath" GOCACHE="$work/gocache" GOFLAGS=-mod=mod
export GOPROXY=off GOSUMDB=off GO111MODULE=on GOTOOLCHAIN=local CGO_ENABLED=1
unset CGO_CFLAGS CGO_LDFLAGS LD_LIBRARY_PATH GOROOT GOWORK
mkdir -p "$HOME"
(
  cd "$app" &&
    go mod init example.com/app &&
    go mod edit -require=hcomm.local/hcomm@v0.0.0 -replace=hcomm.local/hcomm="$prefix/go/hcomm" &&
    go build -o "$app/app" .
) >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "cannot build a Go program against the installed tree"; }
cat "$app/go.mod"

# The program finds the installed library through its RUNPATH alone.
readelf -d "$app/app" | grep -q 'NEEDED.*libhcomm_c.so' || fail "the program does not link libhcomm_c.so"
found="$(ldd "$app/app" | awk '$1 == "libhcomm_c.so" { print $3 }')"
[[ -n "$found" && "$(realpath "$found")" == "$(realpath "$prefix/lib/libhcomm_c.so")" ]] ||
  fail "libhcomm_c.so resolves to '$found', not $prefix/lib/libhcomm_c.so"

out="$work/out.txt"
(cd "$work" && timeout -k 5 180 "$prefix/bin/hcomm_run" -n 4 --timeout 120 -- "$app/app") >"$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || fail "the Go program on 4 ranks exited $rc"
for r in 0 1 2 3; do
  grep -qF "[rank $r] ok: ring, allreduce, group, stream, error (HCOMM_ERR_INVALID_ARGUMENT)" "$out" ||
    fail "rank $r did not print its ok line"
done
echo "PASS: the installed Go package builds and runs without Bazel"
