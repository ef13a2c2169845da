package hcomm

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"hcomm.local/hcomm/internal/capi"
)

// Number is the element type of every buffer: the Go types with an hcomm
// dtype (INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT32, FLOAT64), or
// a type defined over one of them.
type Number interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Op is a reduction operation (hcomm_reduce_op_t).
type Op int

// The reduction operations. Avg divides by the communicator size (integer
// types truncate).
const (
	Sum  Op = 0
	Prod Op = 1
	Min  Op = 2
	Max  Op = 3
	Avg  Op = 4
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "Sum"
	case Prod:
		return "Prod"
	case Min:
		return "Min"
	case Max:
		return "Max"
	case Avg:
		return "Avg"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Compression is what Comm.SetCompression turns on (the config key
// "compression"). The constants are flags: CompressionFP16 or
// CompressionBF16 (FLOAT32 data travels as 16-bit floats; reductions still
// accumulate in float32; other types are never compressed), at most one
// of the two, with or without CompressionDelta (point-to-point and
// broadcast send only what changed since the previous message of the same
// size, losslessly), e.g. CompressionFP16|CompressionDelta.
type Compression int

// The compression flags.
const (
	CompressionNone  Compression = 0
	CompressionFP16  Compression = 1
	CompressionBF16  Compression = 2
	CompressionDelta Compression = 4
)

// compressionFlags are the flags in the order of the config value.
var compressionFlags = []struct {
	flag       Compression
	name, item string
}{
	{CompressionFP16, "FP16", "fp16"},
	{CompressionBF16, "BF16", "bf16"},
	{CompressionDelta, "Delta", "delta"},
}

// String names the flags, e.g. "FP16|Delta", "None"; "Compression(8)" for
// a value with other bits.
func (k Compression) String() string {
	if k == CompressionNone {
		return "None"
	}
	if k < 0 || k&^(CompressionFP16|CompressionBF16|CompressionDelta) != 0 {
		return "Compression(" + strconv.Itoa(int(k)) + ")"
	}
	var names []string
	for _, f := range compressionFlags {
		if k&f.flag != 0 {
			names = append(names, f.name)
		}
	}
	return strings.Join(names, "|")
}

// configValue is k as the value of the config key "compression"
// ("fp16,delta", "none"), or a StatusInvalidArgument error that names
// op's argument kind.
func (k Compression) configValue(op string) (string, error) {
	if k < 0 || k&^(CompressionFP16|CompressionBF16|CompressionDelta) != 0 {
		return "", invalid("%s: kind %d has bits that are no Compression flag (CompressionNone=0, "+
			"CompressionFP16=1, CompressionBF16=2, CompressionDelta=4)", op, int(k))
	}
	if k&CompressionFP16 != 0 && k&CompressionBF16 != 0 {
		return "", invalid("%s: kind %v sets both CompressionFP16 and CompressionBF16; data "+
			"travels in at most one 16-bit format (FP16|Delta and BF16|Delta are allowed)", op, k)
	}
	var items []string
	for _, f := range compressionFlags {
		if k&f.flag != 0 {
			items = append(items, f.item)
		}
	}
	if len(items) == 0 {
		return "none", nil
	}
	return strings.Join(items, ","), nil
}

const (
	// AnySource as the source of Recv/Irecv matches a message from any rank.
	AnySource = -1
	// AnyTag as the tag of Recv/Irecv matches any tag.
	AnyTag = -1
	// Undefined as the color of Split: this rank joins no new communicator.
	Undefined = -1
)

// Version returns the version of the loaded libhcomm_c (hcomm_version).
func Version() (major, minor, patch int) {
	var a, b, c int32
	if capi.Hcomm_version(&a, &b, &c) != nil {
		return 0, 0, 0
	}
	return int(a), int(b), int(c)
}

// dtypeOf is T's hcomm_dtype_t.
func dtypeOf[T Number]() capi.Hcomm_dtype_t {
	switch reflect.TypeOf((*T)(nil)).Elem().Kind() {
	case reflect.Int8:
		return 0 // HCOMM_INT8
	case reflect.Uint8:
		return 1 // HCOMM_UINT8
	case reflect.Int32:
		return 2 // HCOMM_INT32
	case reflect.Uint32:
		return 3 // HCOMM_UINT32
	case reflect.Int64:
		return 4 // HCOMM_INT64
	case reflect.Uint64:
		return 5 // HCOMM_UINT64
	case reflect.Float32:
		return 8 // HCOMM_FLOAT32
	case reflect.Float64:
		return 9 // HCOMM_FLOAT64
	}
	panic("hcomm: unreachable: not a Number type")
}

// ptr is the address of s's first element, nil for an empty slice. The
// pointer goes straight to C for the length of one blocking call.
func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// sameStart reports whether a and b start at the same address (both
// non-empty).
func sameStart[T any](a, b []T) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// cint checks that v fits a C int (the C API takes int); what names the
// argument in the error.
func cint(op, what string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return invalid("%s: %s %d does not fit a C int", op, what, v)
	}
	return nil
}

// cstring checks that s, handed to C as a NUL-terminated string, holds no
// NUL (C would read it cut there); what names the argument in the error,
// quoting it where that is no secret (config values may be job tokens).
func cstring(op, what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return invalid("%s: %s contains a NUL byte, which C would take as the end of the string",
			op, what)
	}
	return nil
}

// millis converts a timeout for the channel calls: negative stays negative
// (the C call rejects it), a fraction of a millisecond rounds up, and huge
// values are clamped.
func millis(d time.Duration) int {
	if d < 0 {
		return -1
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxInt32 {
		ms = math.MaxInt32
	}
	return int(ms)
}
