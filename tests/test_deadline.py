"""A rule past its budget is stopped at the call, whatever it catches (``minikafka/deadline.py``).

Before, the guard raised ``RuleTimeout`` (a ``BaseException``) once: ``except Exception`` let it
pass, but a student's bare ``except:`` inside a loop caught it and went round again, and the cell
ran for ever (Jupyter's interrupt, a ``KeyboardInterrupt``, was caught the same way). A rule that
caught it once and returned had its answer used as if in time.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from minikafka import deadline
from minikafka.deadline import RuleTimeout, call_within
from minikafka.rules import RuleError, Rules

pytestmark = pytest.mark.skipif(not deadline.can_interrupt(), reason="no interval timer on this platform")


def catch_all_loop():
    while True:
        try:
            sum(range(100))
        except:  # noqa: E722 - what students write
            pass


def catch_all_sleep():
    while True:
        try:
            time.sleep(1)
        except BaseException:
            continue


def caller_catches_too():  # the catch-all loop one frame down, and another around it
    while True:
        try:
            catch_all_loop()
        except:  # noqa: E722
            pass


def caught_once_then_returns():
    try:
        while True:
            pass
    except:  # noqa: E722
        return 7


class Suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True  # swallows whatever the block raised


def suppressed_in_a_loop():
    while True:
        with Suppress():
            while True:
                pass


def generator_that_catches():
    def numbers():
        while True:
            try:
                yield 1
            except:  # noqa: E722
                pass
    for _ in numbers():
        try:
            pass
        except:  # noqa: E722
            pass


def loop_in_finally():
    try:
        while True:
            pass
    finally:
        while True:
            try:
                pass
            except:  # noqa: E722
                pass


def deep(n=0):
    if n == 40:
        catch_all_loop()
    try:
        return deep(n + 1)
    except:  # noqa: E722
        return deep(n + 1)


STUBBORN = [catch_all_loop, catch_all_sleep, caller_catches_too, caught_once_then_returns, suppressed_in_a_loop,
            generator_that_catches, loop_in_finally, deep]


@pytest.mark.parametrize("fn", STUBBORN, ids=lambda f: f.__name__)
def test_a_call_past_its_budget_is_stopped_whatever_it_catches(fn):
    started = time.monotonic()
    with pytest.raises(RuleTimeout):
        call_within(0.1, fn)
    assert time.monotonic() - started < 5  # (a hang fails by never returning; the old guard hung on all but one)
    assert sys.gettrace() is None and sys.getprofile() is None  # nothing left behind
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) or callable(signal.getsignal(signal.SIGALRM))
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("fn", [catch_all_loop, caught_once_then_returns, caller_catches_too, deep],
                         ids=lambda f: f.__name__)
def test_the_timeout_points_at_the_students_line_that_was_running(fn):
    """The traceback the student reads (the guard's ``RuleError.__cause__``) ends where their code was
    when its time was up, not inside the deadline's own code: the first RuleTimeout is the one
    raised, even when the call caught it and more followed."""
    import traceback

    with pytest.raises(RuleTimeout) as caught:
        call_within(0.1, fn)
    frames = [f.name for f in traceback.extract_tb(caught.value.__traceback__)]
    students = {"catch_all_loop", "caught_once_then_returns", "caller_catches_too", "deep"}
    assert frames[1] == "call_within" and frames[-2] in students and frames[-1] == "expired", frames
    # (the last: the timer's handler, which raised it at the student's line)


def test_a_call_within_its_budget_returns_its_value_and_traces_nothing():
    seen = []

    def rule(x):
        seen.append(sys.gettrace())
        return x * 2

    assert call_within(1.0, rule, 21) == 42
    assert seen == [None] and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_timer_and_handler_already_set_are_put_back():
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with pytest.raises(RuleTimeout):
            call_within(0.05, catch_all_loop)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < left <= 30 and fired == []
        assert signal.getsignal(signal.SIGALRM) is not deadline._Stop.expired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_debuggers_trace_function_is_left_alone():
    """Under a debugger (a trace function already set) the stop does not take it over: a loop
    that lets RuleTimeout pass is still stopped, and the debugger's function is still set."""
    def debugger(frame, event, arg):
        return None

    def plain_loop():
        while True:
            try:
                pass
            except Exception:
                pass

    sys.settrace(debugger)
    try:
        with pytest.raises(RuleTimeout):
            call_within(0.05, plain_loop)
        assert sys.gettrace() is debugger
    finally:
        sys.settrace(None)


def test_the_guard_reports_a_catch_all_loop_as_a_rule_that_never_returns():
    def high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        while True:
            try:
                return max(follower_leos[b] for b in isr)  # a KeyError for the leader: caught, and again
            except:  # noqa: E722
                pass

    guarded = Rules({"high_watermark": high_watermark}, node=1, clock=lambda: 7, budget_s=0.1)
    with pytest.raises(RuleError) as e:
        guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)
    assert str(e.value).splitlines()[0] == ("your rule high_watermark broke on broker 1 at t=7 ms: it was still "
                                            "running after 0.1 s of wall time (a loop that never ends?)")
    assert "it returned: (nothing: still running after 0.1 s)" in str(e.value)


# In an interpreter of its own: the grader's seal (an audit hook) cannot be removed from pytest's.
SEALED = r"""
import sys
from minikafka.course import watch
exec(compile(watch.seal_cell(["minikafka.partitioner:murmur2"], int(sys.argv[1])), "<seal>", "exec"))
from minikafka.rules import Rules, RuleError

def range_assign(partitions_per_topic, subscriptions):
    while True:
        pass

for armed in (True, False):
    if armed:
        sys.audit(watch.EVENT, "arm", ["minikafka.partitioner:murmur2"], ["range_assign"], [range_assign], False)
    try:
        Rules({"range_assign": range_assign}, node="consumer 1", budget_s=0.05).range_assign({"t": 2}, {"a": ["t"]})
    except RuleError as e:
        print("stopped:", str(e).splitlines()[0])
    out = []
    sys.audit(watch.EVENT, "verdict", out, "@n:", "")
    print("verdict:", out[0])
"""


def test_in_the_graders_sealed_kernel_a_rule_past_its_budget_never_touches_the_trace_function():
    """The seal refuses ``sys.settrace`` and counts any call of it as tampering: the stop must not
    try it there (the cells' time limit stops a catch-all loop instead), or a rule that only ran
    too long would read as a student switching the watch off."""
    from minikafka.course import watch

    done = subprocess.run([sys.executable, "-c", SEALED, str(watch.Handshake().public)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[1:]  # (the first: the seal's public number)
    assert lines == ["stopped: your rule range_assign broke on consumer 1 at t=-1 ms: it was still running after "
                     "0.05 s of wall time (a loop that never ends?)", "verdict: ok",
                     "stopped: your rule range_assign broke on consumer 1 at t=-1 ms: it was still running after "
                     "0.05 s of wall time (a loop that never ends?)", "verdict: the grader's watch was not armed"], lines
