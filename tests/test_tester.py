"""The tester (``minikafka.course.judge``): a student's rules run the cluster and a fault campaign
judges it. Kafka's rules pass the default campaign; the classic wrong rules students write are
each caught within it, with a verdict that names what went wrong."""

from __future__ import annotations

import pytest

from minikafka import rules as R
from minikafka.course import judge
from minikafka.checker.campaign import CAMPAIGN_BROKER_CONFIG
from minikafka.course.tester import DEFAULT_SCHEDULES, SCENARIOS, _drawn, run_judged
from minikafka.errors import IllegalArgumentError


def _members(isr, pending_isr):
    return set(isr) | set(pending_isr or ())


# --- the classic wrong rules, per seam ----------------------------------------------------------------


def hw_is_the_leaders_log_end(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    return leader_leo


def hw_takes_the_max(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    leos = [leader_leo] + [follower_leos.get(b, -1) for b in _members(isr, pending_isr) if b != leader]
    return max(hw, max(leos))


def hw_forgets_it_never_goes_back(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    return min([leader_leo] + [follower_leos.get(b, -1) for b in _members(isr, pending_isr) if b != leader])


def hw_never_moves(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    return hw


def hw_ignores_the_pending_isr(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    return max(hw, min([leader_leo] + [follower_leos.get(b, -1) for b in isr if b != leader]))


def hw_over_the_proposed_isr_alone(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    members = isr if pending_isr is None else pending_isr
    return max(hw, min([leader_leo] + [follower_leos.get(b, -1) for b in members if b != leader]))


def hw_skips_followers_not_heard_from(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    leos = [follower_leos[b] for b in _members(isr, pending_isr) if b != leader and follower_leos.get(b, -1) >= 0]
    return max(hw, min([leader_leo] + leos))


def caught_up_only_at_the_leaders_end(last_caught_up_ms, fetch, previous_fetch):
    time_ms, fetch_offset, leader_leo = fetch
    return max(last_caught_up_ms, time_ms) if fetch_offset >= leader_leo else last_caught_up_ms


def caught_up_by_offset_lag(last_caught_up_ms, fetch, previous_fetch):  # Kafka's old replica.lag.max.messages
    time_ms, fetch_offset, leader_leo = fetch
    return max(last_caught_up_ms, time_ms) if leader_leo - fetch_offset <= 5 else last_caught_up_ms


def caught_up_never_again(last_caught_up_ms, fetch, previous_fetch):
    return last_caught_up_ms


def truncate_never(leader_epoch, leader_end_offset, follower_epochs, follower_leo, follower_log_start):
    return follower_leo


def truncate_at_the_later_end(leader_epoch, leader_end_offset, follower_epochs, follower_leo, follower_log_start):
    my_epoch, my_end = R.end_offset_for(follower_epochs, leader_epoch, follower_leo)
    return min(max(leader_end_offset, my_end), follower_leo) if my_epoch >= 0 else follower_log_start


def truncate_at_own_epoch_end(leader_epoch, leader_end_offset, follower_epochs, follower_leo, follower_log_start):
    my_epoch, my_end = R.end_offset_for(follower_epochs, leader_epoch, follower_leo)
    return my_end if my_epoch >= 0 else follower_log_start


WRONG = [
    ("high_watermark", hw_is_the_leaders_log_end, "lost-write"),
    ("high_watermark", hw_takes_the_max, "lost-write"),
    ("high_watermark", hw_forgets_it_never_goes_back, "rule-error"),
    ("high_watermark", hw_never_moves, "stuck"),
    ("high_watermark", hw_ignores_the_pending_isr, "lost-write"),  # by a KIP-497 scenario
    ("high_watermark", hw_over_the_proposed_isr_alone, "lost-write"),  # by the other one
    ("high_watermark", hw_skips_followers_not_heard_from, "lost-write"),  # by a new leader dying at once
    ("last_caught_up", caught_up_only_at_the_leaders_end, "isr-shrank-while-healthy"),
    ("last_caught_up", caught_up_by_offset_lag, "isr-shrank-while-healthy"),
    ("last_caught_up", caught_up_never_again, "isr-shrank-while-healthy"),
    ("truncation_offset", truncate_never, "stuck"),
    ("truncation_offset", truncate_at_the_later_end, "stuck"),
    ("truncation_offset", truncate_at_own_epoch_end, "stuck"),
]


@pytest.mark.campaign
def test_kafkas_rules_pass_the_default_campaign_through_the_guard():
    rules = {name: rule.reference for name, rule in R.RULES.items() if rule.lecture == "04"}
    # The reference itself is not guarded; wrap it so the campaign runs the student's path.
    yours = {name: (lambda fn: lambda *args: fn(*args))(fn) for name, fn in rules.items()}
    verdict = judge(yours)
    assert verdict.ok and verdict.passed == verdict.schedules == DEFAULT_SCHEDULES
    assert str(verdict).startswith(f"0 anomalies in {DEFAULT_SCHEDULES} schedules (seed 0) and 3 scenarios; "
                                   "your rules: high_watermark, last_caught_up, truncation_offset")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_kafkas_rules_lose_nothing_in_a_scenario_with_the_campaigns_socket_timeout(scenario):
    """The first scenario's AlterPartition takes 3 s to reach the controller, past the
    campaign's replica.socket.timeout.ms: the leader keeps its proposal pending (asking again)
    until answered, so nothing acknowledged is lost when the follower it proposed leads."""
    assert CAMPAIGN_BROKER_CONFIG["replica.socket.timeout.ms"] < 3_000
    assert scenario({name: rule.reference for name, rule in R.RULES.items()}) is None


@pytest.mark.parametrize("seam, rule, kind", WRONG, ids=[r.__name__ for _, r, _ in WRONG])
@pytest.mark.campaign
def test_a_classic_wrong_rule_is_caught_within_the_default_schedules(seam, rule, kind):
    verdict = judge({seam: rule}, shrinking=False)
    assert not verdict.ok and verdict.failure.kind == kind
    scenario = {hw_ignores_the_pending_isr: "a follower rejoins the ISR while the controller is slow (KIP-497)",
                hw_over_the_proposed_isr_alone: "a follower is dropped while the controller is unreachable (KIP-497)",
                hw_skips_followers_not_heard_from: "a new leader dies before its followers fetch from it",
                }.get(rule)
    if scenario is not None:  # what random faults rarely line up: a scenario's case
        assert verdict.passed == DEFAULT_SCHEDULES and verdict.failure.scenario == scenario
        assert str(verdict).startswith(f'FAILED: the scenario "{scenario}" (after {DEFAULT_SCHEDULES} '
                                       'schedules passed): lost-write')
    else:
        assert verdict.passed < DEFAULT_SCHEDULES
    assert verdict.failure.rule_calls[seam] > 0


@pytest.mark.campaign
def test_the_verdict_shows_the_shrunk_schedule_as_a_timeline():
    verdict = judge({"high_watermark": hw_is_the_leaders_log_end}, schedules=5)
    f = verdict.failure
    text = str(verdict)
    assert text.startswith(f"FAILED: schedule 1 of 5 (seed {f.seed}; shrunk: ")
    assert "lost-write" in text.splitlines()[0]
    _, drawn_faults = _drawn(f.seed)
    assert f.shrunk.get("faults", drawn_faults) < drawn_faults or f.shrunk  # made smaller
    assert "nemesis: " in text and "Kafka's rule: " in text and "-> " in text
    assert text.splitlines()[-1].startswith("then: lost-write: v-") and "acked at checked-" in text
    # The shrunk schedule fails again when replayed with its arguments.
    assert run_judged({"high_watermark": hw_is_the_leaders_log_end}, f.seed, **f.shrunk).kind == f.kind


def test_a_rule_that_breaks_its_contract_is_the_verdict_with_its_call():
    verdict = judge({"high_watermark": hw_forgets_it_never_goes_back}, schedules=3)
    assert verdict.failure.kind == "rule-error"
    assert "it moved the high watermark backwards" in verdict.failure.what
    assert str(verdict).splitlines()[-1].startswith("then: rule-error: it moved the high watermark backwards")


def lcu_forgets_a_return(last_caught_up_ms, fetch, previous_fetch):
    "No return on the last path: None where Kafka's rule keeps last_caught_up_ms."
    time_ms, fetch_offset, leader_leo = fetch
    if fetch_offset >= leader_leo:
        return max(time_ms, last_caught_up_ms)
    if previous_fetch is not None and fetch_offset >= previous_fetch[2]:
        return max(previous_fetch[0], last_caught_up_ms)


def test_a_rule_that_breaks_after_faults_shows_them_before_its_call():
    # A student trial: the timeline showed the one call, none of the faults that struck first
    # (the replay did); a rule error stops the schedule before its report holds them.
    verdict = judge({"last_caught_up": lcu_forgets_a_return})
    f = verdict.failure
    assert f.kind == "rule-error" and "it returned NoneType None" in f.what
    assert f.faults and all(t <= f.calls[-1].time_ms for t, _ in f.faults), f.faults
    lines = str(verdict).splitlines()
    nemesis = [i for i, line in enumerate(lines) if " nemesis: " in line]
    call = next(i for i, line in enumerate(lines) if "last_caught_up(last_caught_up_ms=" in line)
    assert len(nemesis) == len(f.faults) and max(nemesis) < call, lines


@pytest.mark.parametrize("kwargs, message", [
    (dict(rules={"high_water": hw_never_moves}), "no rule named 'high_water'"),
    (dict(rules={"high_watermark": hw_never_moves}, schedules=0), "schedules must be an int >= 1, not 0"),
    (dict(rules={"high_watermark": hw_never_moves}, seed="1"), "seed must be an int, not '1'"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(IllegalArgumentError) as e:
        judge(**kwargs)
    assert message in str(e.value)


def test_a_schedule_with_rules_replays_by_name():
    from minikafka.checker.campaign import _params

    params = _params(rules={"high_watermark": hw_never_moves}, acks="all")
    assert params.rules == (("high_watermark", hw_never_moves),)
    assert params.call(5) == "run_schedule(seed=5, rules={'high_watermark': hw_never_moves})"


def test_a_rule_slow_on_every_call_stops_the_judge_at_its_allowance_and_nothing_is_shrunk(monkeypatch):
    """A rule under its per-call budget but slow on every call (a student trial: a judge of 04 ran
    for about 20 minutes with no word): the judge stops when its allowance is spent, names the
    rule's calls and seconds, and runs none of the student's code after that (no shrinking)."""
    import time

    from minikafka.course import tester

    monkeypatch.setattr(tester, "ALLOWANCE_S", 0.5)
    ran = []

    def sleepy_lookup(entries, offset, base_offset):
        ran.append(1)
        time.sleep(0.02)
        return R.index_lookup(entries, offset, base_offset)

    verdict = judge({"index_lookup": sleepy_lookup}, seed=3)  # a whole judge makes ~3,400 calls: 68 s
    assert not verdict.ok
    text = str(verdict)
    assert "your rules used up the judge's allowance of 0.5 s of wall time in all (index_lookup " in text, text
    assert "ms a call)" in text
    assert len(ran) <= 0.5 / 0.02 + 1  # each call sleeps 20 ms: the allowance holds 25 of them

