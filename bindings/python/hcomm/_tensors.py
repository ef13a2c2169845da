"""Tensors as the C API sees them: memory, element count and hcomm dtype.

A tensor is a C-contiguous numpy array, a CPU torch tensor, or any object
with the buffer protocol (bytearray, memoryview, array.array, mmap, bytes
where nothing is written). Nothing is copied: the extension module gets an
object that exports the tensor's own memory (for torch, the zero-copy numpy
view `t.detach().numpy()`), and hands its address to C.

dtypes: numpy/torch int8, uint8, int32, uint32, int64, uint64, float16,
bfloat16 (any dtype named "bfloat16", e.g. torch.bfloat16 or
ml_dtypes.bfloat16), float32, float64; buffer format codes b B c i I l L q Q
n N e f d (by item size); plain bytes are uint8. Anything else, a
non-contiguous tensor, or a read-only one given to a call that writes,
raises InvalidArgumentError.
"""

import sys

from . import _native
from .errors import _invalid

try:  # numpy is optional: buffer-protocol objects work without it.
    import numpy as _np
except ImportError:  # pragma: no cover - Debian's python3-numpy is a dependency
    _np = None

INT8 = _native.HCOMM_INT8
UINT8 = _native.HCOMM_UINT8
INT32 = _native.HCOMM_INT32
UINT32 = _native.HCOMM_UINT32
INT64 = _native.HCOMM_INT64
UINT64 = _native.HCOMM_UINT64
FLOAT16 = _native.HCOMM_FLOAT16
BFLOAT16 = _native.HCOMM_BFLOAT16
FLOAT32 = _native.HCOMM_FLOAT32
FLOAT64 = _native.HCOMM_FLOAT64

# hcomm dtype -> (name, bytes per element)
DTYPES = {
    INT8: ("int8", 1),
    UINT8: ("uint8", 1),
    INT32: ("int32", 4),
    UINT32: ("uint32", 4),
    INT64: ("int64", 8),
    UINT64: ("uint64", 8),
    FLOAT16: ("float16", 2),
    BFLOAT16: ("bfloat16", 2),
    FLOAT32: ("float32", 4),
    FLOAT64: ("float64", 8),
}
_BY_NAME = {name: code for code, (name, _) in DTYPES.items()}

# struct format character -> {item size: hcomm dtype}
_FORMATS = {
    "b": {1: INT8},
    "B": {1: UINT8},
    "c": {1: UINT8},
    "i": {4: INT32, 8: INT64},
    "l": {4: INT32, 8: INT64},
    "q": {8: INT64},
    "n": {4: INT32, 8: INT64},
    "I": {4: UINT32, 8: UINT64},
    "L": {4: UINT32, 8: UINT64},
    "Q": {8: UINT64},
    "N": {4: UINT32, 8: UINT64},
    "e": {2: FLOAT16},
    "f": {4: FLOAT32},
    "d": {8: FLOAT64},
}

_LITTLE_ENDIAN = sys.byteorder == "little"


class Buffer:
    """What one C call needs of a tensor.

    obj: exports the tensor's memory through the buffer protocol (passed to
         the extension module); count: elements; dtype: hcomm dtype;
         itemsize: bytes per element; nbytes: count * itemsize.
    """

    __slots__ = ("obj", "count", "dtype", "itemsize", "nbytes", "source")

    def __init__(self, obj, count, dtype, source):
        self.obj = obj
        self.count = count
        self.dtype = dtype
        self.itemsize = DTYPES[dtype][1]
        self.nbytes = count * self.itemsize
        self.source = source

    @property
    def dtype_name(self):
        return DTYPES[self.dtype][0]

    def address(self):
        """The address of the first byte (for overlap checks only)."""
        return _native.hcomm_py_buffer_address(self.obj)

    def keep(self):
        """An object that keeps the memory alive and unresizable while it lives."""
        return memoryview(self.obj)


def _torch_tensor_class():
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def dtype_of(name):
    """The hcomm dtype of a dtype name ("float32", "torch.float32", ...), or None."""
    name = str(name)
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _BY_NAME.get(name)


def as_buffer(t, writable, what="tensor"):
    """The Buffer of tensor t. writable: the call writes into t."""
    if isinstance(t, Buffer):
        return t
    tensor_cls = _torch_tensor_class()
    if tensor_cls is not None and isinstance(t, tensor_cls):
        return _torch_buffer(t, writable, what)
    if _np is not None and isinstance(t, _np.ndarray):
        return _numpy_buffer(t, writable, what)
    return _plain_buffer(t, writable, what)


def _numpy_buffer(a, writable, what, source=None):
    source = a if source is None else source
    if not a.flags.c_contiguous:
        raise _invalid(
            "%s: numpy array of shape %s with strides %s is not C-contiguous; hcomm works "
            "in place on contiguous memory (use np.ascontiguousarray and copy back)"
            % (what, a.shape, a.strides))
    if writable and not a.flags.writeable:
        raise _invalid("%s: numpy array is read-only, but this call writes into it" % what)
    dtype = _BY_NAME.get(a.dtype.name)
    if dtype is None or (a.dtype.byteorder == ">" and _LITTLE_ENDIAN) or (
            a.dtype.byteorder == "<" and not _LITTLE_ENDIAN):
        raise _invalid(
            "%s: unsupported dtype %s (hcomm takes %s)"
            % (what, a.dtype.str if a.dtype.name in _BY_NAME else a.dtype.name,
               ", ".join(n for n, _ in DTYPES.values())))
    obj = a
    if dtype == BFLOAT16:  # Custom dtypes cannot be exported through the buffer protocol.
        obj = a.view(_np.uint16)
    elif a.ndim == 0:
        obj = a.reshape(1)
    return Buffer(obj, a.size, dtype, source)


def _torch_buffer(t, writable, what):
    if t.device.type != "cpu":
        raise _invalid("%s: a tensor on %s; hcomm takes CPU tensors" % (what, t.device))
    dtype = dtype_of(t.dtype)
    if dtype is None:
        raise _invalid("%s: unsupported dtype %s (hcomm takes %s)"
                       % (what, t.dtype, ", ".join(n for n, _ in DTYPES.values())))
    if t.layout is not None and str(t.layout) != "torch.strided":
        raise _invalid("%s: a %s tensor; hcomm takes dense (strided) tensors"
                       % (what, t.layout))
    if not t.is_contiguous():
        raise _invalid(
            "%s: torch tensor of shape %s with strides %s is not contiguous; hcomm works in "
            "place on contiguous memory (use .contiguous() and copy back)"
            % (what, tuple(t.shape), tuple(t.stride())))
    d = t.detach()  # Same memory, no autograd.
    if dtype == BFLOAT16:
        import torch  # Only reached when torch is already imported.
        a = d.view(torch.int16).numpy()  # Same memory; numpy has no bfloat16.
    else:
        a = d.numpy()  # Zero copy for CPU tensors.
    if a.ndim == 0:
        a = a.reshape(1)
    return Buffer(a, int(t.numel()), dtype, t)


def _plain_buffer(t, writable, what):
    try:
        mv = memoryview(t)
    except TypeError:
        raise _invalid(
            "%s: %s is not a tensor: pass a numpy array, a CPU torch tensor or an object "
            "with the buffer protocol (bytearray, memoryview, array.array)"
            % (what, type(t).__name__)) from None
    except ValueError as e:  # a released memoryview, say
        raise _invalid("%s: %s cannot be used: %s" % (what, type(t).__name__, e)) from None
    if not mv.c_contiguous:
        raise _invalid("%s: %s is not C-contiguous; hcomm works in place on contiguous memory"
                       % (what, type(t).__name__))
    if writable and mv.readonly:
        raise _invalid("%s: %s is read-only, but this call writes into it (use a bytearray)"
                       % (what, type(t).__name__))
    fmt = mv.format or "B"
    if fmt[0] in "@=<" and len(fmt) == 2:
        if fmt[0] == "<" and not _LITTLE_ENDIAN:
            fmt = "?"
        else:
            fmt = fmt[1]
    dtype = _FORMATS.get(fmt, {}).get(mv.itemsize)
    if dtype is None:
        raise _invalid(
            "%s: %s has buffer format %r (item size %d), which maps to no hcomm dtype; "
            "use memoryview(x).cast('B') to send raw bytes"
            % (what, type(t).__name__, mv.format, mv.itemsize))
    return Buffer(mv, mv.nbytes // mv.itemsize, dtype, t)
