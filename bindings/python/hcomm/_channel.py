"""SharedMemoryChannel: a named FIFO of messages in host shared memory.

For processes on one machine that share no communicator (e.g. a parameter
server handing weights to local workers):

    with hcomm.SharedMemoryChannel("weights", 1 << 20, create=True) as ch:
        ch.write(np.arange(4, dtype=np.float32))      # any buffer, no copy
    # in another process:
    with hcomm.SharedMemoryChannel("weights", 1 << 20) as ch:
        w = np.frombuffer(ch.read(), dtype=np.float32)

Channel "x" is /dev/shm/hcomm-ch-x (mode 0600). The creator's close()
removes the name; handles open elsewhere keep working until closed. Any
thread may use a channel; close() waits for reads and writes in progress on
other threads (up to their timeout_ms).
"""

import weakref

from . import _native as _n
from . import _tensors
from ._handle import Handle, c_string
from .errors import MismatchError, Status, _invalid, _message

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
        c_string(name, "channel name %r" % name)
        if not isinstance(size, int) or size < 0:
            raise _invalid("channel size must be an int >= 0, not %r" % (size,))
        self.name = name
        self.size = size
        self.created = bool(create)
        self.timeout_ms = timeout_ms
        self._read_bytes = max(64, min(size or _INITIAL_READ_BYTES, _INITIAL_READ_BYTES))
        self._use = Handle(_n.hcomm_channel_open(name, size, 1 if create else 0),
                           "channel '%s' has been closed" % name)
        _open_channels.add(self)

    def _timeout(self, timeout_ms):
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(t, int):
            raise _invalid("timeout_ms must be an int, not %r" % (t,))
        return t

    @property
    def closed(self):
        """True once close() has begun."""
        return self._use.closed

    def write(self, buf, timeout_ms=None):
        """Appends one message: the bytes of buf (bytes, bytearray, numpy
        array, ...), copied once into shared memory. Waits up to timeout_ms for
        room (TimeoutError)."""
        b = _tensors.as_buffer(buf, False, "SharedMemoryChannel.write")
        timeout_ms = self._timeout(timeout_ms)
        with self._use as h:
            _n.hcomm_channel_write(h, b.obj, b.nbytes, timeout_ms)

    def read(self, timeout_ms=None):
        """Removes and returns the next message as bytes. Waits up to timeout_ms
        for one (TimeoutError); grows its buffer to fit any message."""
        timeout_ms = self._timeout(timeout_ms)
        for _ in range(_MAX_READ_RETRIES):
            buf = bytearray(self._read_bytes)
            try:
                with self._use as h:
                    n = _n.hcomm_channel_read(h, buf, len(buf), timeout_ms)
            except MismatchError as e:
                if e.nbytes is None or e.nbytes <= len(buf):
                    raise
                self._read_bytes = e.nbytes  # Another reader may take it first: retry.
                continue
            return bytes(buf) if n == len(buf) else bytes(memoryview(buf)[:n])
        raise MismatchError(_message(Status.ERR_MISMATCH,
                                     "channel '%s': messages kept outgrowing the read buffer"
                                     % self.name))

    def read_into(self, buf, timeout_ms=None):
        """Reads the next message into buf (writable buffer, no copy); returns
        its size in bytes. MismatchError (with .nbytes) if it does not fit; the
        message then stays in the channel."""
        b = _tensors.as_buffer(buf, True, "SharedMemoryChannel.read_into")
        timeout_ms = self._timeout(timeout_ms)
        with self._use as h:
            return _n.hcomm_channel_read(h, b.obj, b.nbytes, timeout_ms)

    def close(self):
        """Releases the handle; the creator's close also removes the name.
        Reads and writes begun after it raise InvalidArgumentError; those in
        progress on other threads are waited for. Calling it again does
        nothing."""
        _open_channels.discard(self)
        self._use.close(_n.hcomm_channel_close)

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
            self.name, " closed" if self._use.closed else "")


def _close_all():
    """atexit: closes channels the program forgot (a creator's close removes
    the name, which would otherwise stay in /dev/shm). One that a daemon
    thread is still reading or writing is left to the process's exit, as in
    _communicator._destroy_all."""
    for ch in list(_open_channels):
        try:
            if not ch._use.busy:
                ch.close()
        except Exception:
            pass
