"""What the package checks before it hands something to the C library.

Handle: one native handle (communicator, request, channel) that several
threads may use at once. The C API forbids destroying a handle while another
thread is in a call on it (the call would run on freed memory), so every call
runs inside an "in use" section:

    with self._use as h:            # InvalidArgumentError once closing began
        _n.hcomm_barrier(h)

and close() marks the handle closing (new sections raise), waits for the
sections in progress to end (every blocking C call ends by its timeout), and
only then releases the handle. A section costs one lock round trip on entry
and one on exit; nothing is allocated.

c_string: a str for a `const char*` parameter, which must not contain NUL
(C would read it cut at the NUL).
"""

import threading

from .errors import _invalid

_OPEN, _CLOSING, _RELEASING, _CLOSED = range(4)


class Handle:
    """A native handle, its in-use sections, and its one release.

    closed_message is the InvalidArgumentError message of a section entered
    once close() has begun.
    """

    __slots__ = ("_lock", "_cv", "_h", "_calls", "_state", "_closed_message")

    def __init__(self, handle, closed_message):
        # Sections take the plain lock (a C-level `with`: Condition's own
        # __enter__ is Python code, several times slower); only close()
        # waits on the condition.
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._h = handle
        self._calls = 0  # Sections in progress; guarded by _lock.
        self._state = _OPEN if handle is not None else _CLOSED
        self._closed_message = closed_message

    def __enter__(self):
        h = self.enter()
        if h is None:
            raise _invalid(self._closed_message)
        return h

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            # Raised within the section (by the C call, mostly): a collective
            # that got this far has taken its turn (see _communicator._collective).
            try:
                exc._hcomm_in_section = True
            except AttributeError:
                pass
        self.exit()

    def enter(self, while_closing=False):
        """Starts a section and returns the handle, or returns None (starting
        nothing) once close() has begun. while_closing: also while close()
        is still waiting for the sections in progress, for calls such as
        hcomm_comm_abort that exist to end those early."""
        with self._lock:
            if self._state == _OPEN or (while_closing and self._state == _CLOSING):
                self._calls += 1
                return self._h
            return None

    def exit(self):
        """Ends a section started by enter()."""
        with self._lock:
            self._calls -= 1
            if not self._calls and self._state != _OPEN:
                self._cv.notify_all()

    @property
    def closed(self):
        """True once close() has begun."""
        return self._state != _OPEN

    @property
    def busy(self):
        """True while a section is in progress (a snapshot)."""
        return self._calls > 0

    @property
    def raw(self):
        """The handle until it is released, else None (outside any section:
        for tests)."""
        return self._h

    def close(self, release, before=None):
        """Releases the handle once: marks it closing, waits for the sections
        in progress, runs before() (which may still use the handle through
        enter(while_closing=True) sections), waits again, then calls
        release(handle). A close() that finds another one under way waits
        for it to finish; one after that does nothing."""
        with self._cv:
            if self._state != _OPEN:
                while self._state != _CLOSED:
                    self._cv.wait()
                return
            self._state = _CLOSING
            while self._calls:
                self._cv.wait()
        try:
            if before is not None:
                before()
        finally:
            with self._cv:
                while self._calls:  # e.g. an abort that began meanwhile
                    self._cv.wait()
                self._state = _RELEASING  # From here on enter() returns None.
                h = self._h
            try:
                release(h)
            finally:
                with self._cv:
                    self._h = None
                    self._state = _CLOSED
                    self._cv.notify_all()


def c_string(value, what):
    """value (a str) for a `const char*` parameter; InvalidArgumentError if it
    contains NUL, which C would take as its end. what names the argument (and
    quotes it where that is no secret: config values may be job tokens)."""
    if "\0" in value:
        raise _invalid("%s contains a NUL character ('\\0'), which C would take as the end "
                       "of the string" % what)
    return value
