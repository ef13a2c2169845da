//go:build !hcomm_bazel

package capi

// Programs built against the installed tree find DIR/lib/libhcomm_c.so
// through their RUNPATH. (The Bazel build, tag hcomm_bazel, sets an
// $ORIGIN-relative RUNPATH instead.)

// #cgo LDFLAGS: -Wl,-rpath,${SRCDIR}/../../../../lib
import "C"
