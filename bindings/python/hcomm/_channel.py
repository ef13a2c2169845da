"""SharedMemoryChannel: a named FIFO of messages in host shared memory.

For processes on one machine that share no communicator (e.g. a parameter
server handing weights to local workers):

    with hcomm.SharedMemoryChannel("weights", 1 << 20, create=True) as ch:
        ch.write(np.arange(4, dtype=np.float32))      # any buffer, no copy
    # in another process:
    with hcomm.SharedMemoryChannel("weights", 1 << 20) as ch:
        w = np.frombuffer(ch.read(), dtype=np.float32)

Channel "x" is /dev/shm/hcomm-ch-x (mode 0600). The creator's close()
removes the name; handles open elsewhere keep working until closed.
"""

import weakref

from . import _native as _n
from . import _tensors
from .errors import MismatchError, _invalid

_open_channels = weakref.WeakSet()

# read() starts with a buffer this large (or the channel size, if smaller)
# and grows it to the size the C API reports for a message that did not fit.
_INITIAL_READ_BYTES = 64 * 1024
_MAX_READ_RETRIES = 16


class SharedMemoryChannel:
    """Opens (create=False) or creates (create=True) the channel `name`.

    size: capacity in bytes when creating (a message of n bytes takes
    8 + n rounded up to 8); when opening it only sizes read()'s first buffer.
    timeout_ms: default wait of write() (for room) and read() (for a
    message); 0 tries once.
    Raises NoDeviceError when opening a name nobody created,
    InvalidArgumentError when creating a name that exists.
    """

    def __init__(self, name, size, create=False, timeout_ms=30000):
        if not isinstance(name, str):
            raise _invalid("channel name must be a str, not %s" % type(name).__name__)
        if not isinstance(size, int) or size < 0:
            raise _invalid("channel size must be an int >= 0, not %r" % (size,))
        self.name = name
        self.size = size
        self.created = bool(create)
        self.timeout_ms = timeout_ms
        self._read_bytes = max(64, min(size or _INITIAL_READ_BYTES, _INITIAL_READ_BYTES))
        self._handle = _n.hcomm_channel_open(name, size, 1 if create else 0)
        _open_channels.add(self)

    def _h(self):
        h = self._handle
        if h is None:
            raise _invalid("channel '%s' has been closed" % self.name)
        return h

    def _timeout(self, timeout_ms):
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(t, int):
            raise _invalid("timeout_ms must be an int, not %r" % (t,))
        return t

    @property
    def closed(self):
        return self._handle is None

    def write(self, buf, timeout_ms=None):
        """Appends one message: the bytes of buf (bytes, bytearray, numpy
        array, ...), copied once into shared memory. Waits up to timeout_ms for
        room (TimeoutError)."""
        b = _tensors.as_buffer(buf, False, "SharedMemoryChannel.write")
        _n.hcomm_channel_write(self._h(), b.obj, b.nbytes, self._timeout(timeout_ms))

    def read(self, timeout_ms=None):
        """Removes and returns the next message as bytes. Waits up to timeout_ms
        for one (TimeoutError); grows its buffer to fit any message."""
        timeout_ms = self._timeout(timeout_ms)
        h = self._h()
        for _ in range(_MAX_READ_RETRIES):
            buf = bytearray(self._read_bytes)
            try:
                n = _n.hcomm_channel_read(h, buf, len(buf), timeout_ms)
            except MismatchError as e:
                if e.nbytes is None or e.nbytes <= len(buf):
                    raise
                self._read_bytes = e.nbytes  # Another reader may take it first: retry.
                continue
            return bytes(buf) if n == len(buf) else bytes(memoryview(buf)[:n])
        raise MismatchError("channel '%s': messages kept outgrowing the read buffer"
                            % self.name)

    def read_into(self, buf, timeout_ms=None):
        """Reads the next message into buf (writable buffer, no copy); returns
        its size in bytes. MismatchError (with .nbytes) if it does not fit; the
        message then stays in the channel."""
        b = _tensors.as_buffer(buf, True, "SharedMemoryChannel.read_into")
        return _n.hcomm_channel_read(self._h(), b.obj, b.nbytes, self._timeout(timeout_ms))

    def close(self):
        """Releases the handle; the creator's close also removes the name.
        Calling it again does nothing."""
        h, self._handle = self._handle, None
        _open_channels.discard(self)
        if h is not None:
            _n.hcomm_channel_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<hcomm.SharedMemoryChannel %r%s>" % (
            self.name, " closed" if self._handle is None else "")


def _close_all():
    """atexit: closes channels the program forgot (a creator's close removes
    the name, which would otherwise stay in /dev/shm)."""
    for ch in list(_open_channels):
        try:
            ch.close()
        except Exception:
            pass
