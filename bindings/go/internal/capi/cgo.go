// Package capi is the SWIG-generated layer over hcomm.h (see
// bindings/go/hcomm_go.i); package hcomm is the API to use.
//
// This file holds the cgo flags for the installed layout, which the Bazel
// build reproduces:
//
//	DIR/include/hcomm/hcomm.h
//	DIR/lib/libhcomm_c.so
//	DIR/go/hcomm/internal/capi/   (this package)
package capi

// #cgo CFLAGS: -I${SRCDIR}/../../../../include
// #cgo LDFLAGS: -L${SRCDIR}/../../../../lib -lhcomm_c
import "C"
