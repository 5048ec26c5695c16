"""Deadline: stop a student's function that runs past its wall-time budget, even one that catches
everything.

Theory of operation
-------------------
``call_within(seconds, fn, *args)`` calls ``fn(*args)`` with a Unix interval timer set. When it
goes off, its handler raises ``RuleTimeout`` at the line the function is running. That is a
``BaseException``, so ``except Exception`` lets it pass; but a bare ``except:`` (or ``except
BaseException``) inside a loop catches it and goes round again, for ever::

    while True:
        try:
            ...
        except:
            pass

So the handler does what a debugger does to stop a program: it sets a trace function on every
frame of the call (each frame between the one interrupted and ``call_within``'s own, and any
frame the call starts after that). The trace function raises ``RuleTimeout`` again at the next
line any of them runs, which is the first line of the handler that caught it. An exception
raised inside an ``except`` block is not caught by that block, so it leaves the frame.

CPython takes off a trace function that raises. A profile function, set with it, puts it back:
at each return into one of the call's frames (so a caller that catches everything too raises at
its handler's first line as well) and at each call the call makes. The timer also fires again
every ``AGAIN_S`` until the call is back in ``call_within``, and raises again. There the trace
and profile functions are taken off before any Python code runs, and ``RuleTimeout`` reaches the
caller, also when the function swallowed every one and returned a value: the first one raised,
whose traceback shows the line the call was running when its time was up.

Nothing is traced before the timer goes off: a call within its budget costs two timer calls.
What is not stopped: a single C call that never returns to Python (``time.sleep`` returns to run
the handler; ``sum(range(10**15))`` does not); two handlers that catch everything nested in one
frame inside a loop, unless the timer's next interruption lands outside both (the inner one
re-raises, the outer catches, and nothing is called in between to put the trace function back);
a rule running under a debugger (its trace function is left alone). The grader's limits on the
whole kernel are the backstop for those.

Where the platform has no interval timer (Windows), or off the main thread (a signal handler
runs only there), the function runs without a budget.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any, Callable

try:  # signal.signal without its conversions to and from enums (an exception each: the guard sets a handler per call)
    from _signal import signal as _set_handler
except ImportError:  # not CPython
    _set_handler = signal.signal

__all__ = ["RuleTimeout", "call_within", "can_interrupt"]

AGAIN_S = 0.01  # after the budget: the interval at which the call is interrupted again until it has returned
# Stop a call that catches everything too (see the module docstring). It takes the thread's trace
# and profile functions while it stops one, so it is off where something else owns them for good:
# the grader's sealed kernel refuses sys.settrace (minikafka.course.watch), and its cells' time
# limit stops a rule there. Where a debugger or profiler is tracing, it is left alone.
CATCH_ALL = True


class RuleTimeout(BaseException):
    """Raised into a rule that ran past its budget (a BaseException: ``except Exception`` in
    the student's code cannot swallow it, and a bare ``except:`` only delays it by a line)."""


def can_interrupt() -> bool:
    """Can ``call_within`` stop a call here (a Unix interval timer, in the main thread)?"""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class _Stop:
    """One call's timer: once it has gone off, every line the call runs raises ``RuleTimeout``."""

    __slots__ = ("home", "fired", "traced", "done", "first")

    def __init__(self, home) -> None:
        self.home = home  # call_within's frame: the frames below it are the call's
        self.fired = False
        self.traced = False  # have the trace and profile functions been set (over none)?
        self.done = False  # call_within is putting things back: the handler does nothing more
        self.first: RuleTimeout | None = None  # the one raised where the call was running: its traceback shows the line

    def _inside(self, frame) -> bool:
        """Is ``frame`` one of the call's (below ``home``), and not this class's own code (the
        handler and what it calls run inside the call's frames, and may be traced)?"""
        while frame is not None:
            if frame.f_code in _OWN:
                return False
            frame = frame.f_back
            if frame is self.home:
                return True
        return False

    def _trace_from(self, frame) -> None:
        """Trace ``frame`` and every frame between it and ``home``."""
        while frame is not None and frame is not self.home:
            frame.f_trace = self.trace
            frame = frame.f_back
        if sys.gettrace() is None:
            sys.settrace(self.trace)

    def trace(self, frame, event, arg):
        if not self._inside(frame):
            return None
        if event == "line" or event == "call":
            raise RuleTimeout()  # (and CPython takes this trace function off: see profile)
        # An exception passing through ("exception": its handler's first line raises) or a frame
        # leaving ("return": raising there would replace the exception on its way out).
        return self.trace

    def profile(self, frame, event, arg):
        """Put the trace function back after it raised: at each return into one of the call's
        frames (the caller may catch everything too) and at each call it makes."""
        if event == "return":
            frame = frame.f_back
        elif event != "call":
            return
        if self._inside(frame):
            self._trace_from(frame)

    def expired(self, signum, frame) -> None:
        if self.done:
            return
        self.fired = True
        signal.setitimer(signal.ITIMER_REAL, AGAIN_S)  # again soon, until call_within is done
        if not self._inside(frame):
            return  # call_within's own lines, just before the call or after it: never raise there
        if CATCH_ALL and not self.traced and sys.gettrace() is None and sys.getprofile() is None:
            self.traced = True
            sys.setprofile(self.profile)
            self._trace_from(frame)
        elif self.traced:  # (either may have been taken off: a RecursionError in it, say)
            if sys.getprofile() is None:
                sys.setprofile(self.profile)
            self._trace_from(frame)
        if self.first is None:
            self.first = RuleTimeout()
            raise self.first
        raise RuleTimeout()


_OWN = frozenset(f.__code__ for f in vars(_Stop).values() if hasattr(f, "__code__"))


def call_within(seconds: float | None, fn: Callable, *args: Any) -> Any:
    """``fn(*args)``, stopped with ``RuleTimeout`` after ``seconds`` of wall time where the platform
    allows (see the module docstring). Any timer and handler already set (a test runner's) are put
    back, the timer with what was left of its delay."""
    if seconds is None or not can_interrupt() or not hasattr(sys, "_getframe"):
        return fn(*args)
    stop = _Stop(sys._getframe())
    old_handler = _set_handler(signal.SIGALRM, stop.expired)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        value = fn(*args)
    except BaseException:
        if not stop.fired:
            raise
        value = None  # (stopped: which exception the caller gets is decided below)
    finally:
        # No Python call until the trace function is off (it would be traced), and the handler
        # may still run between any two of these lines (it then re-arms at most, never raises).
        signal.setitimer(signal.ITIMER_REAL, 0)
        if stop.traced:
            sys.setprofile(None)
            sys.settrace(None)
        stop.done = True
        signal.setitimer(signal.ITIMER_REAL, 0)  # (a re-arm by a handler run after the first)
        _set_handler(signal.SIGALRM, old_handler)
        if old_delay:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 1e-3), old_interval)
    if stop.fired:  # stopped, or it caught every RuleTimeout and returned: too late either way
        first, stop.first = stop.first, None
        # The first one raised where the call was running, so the traceback shows the student's line.
        raise first if first is not None else RuleTimeout()
    return value
