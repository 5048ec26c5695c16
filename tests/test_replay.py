"""A failing schedule of the judge, replayed on a live dashboard (minikafka.course.replay)."""

import pytest

from minikafka.course import judge
from minikafka.course.replay import Replay
from minikafka.course.tester import Verdict
from minikafka.errors import IllegalArgumentError


def leader_end(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    """A classic wrong high watermark: the leader's own log end."""
    return max(hw, leader_leo)


@pytest.fixture(scope="module")
def failing():
    verdict = judge({"high_watermark": leader_end})
    assert not verdict.ok and verdict.failure.kind == "lost-write" and verdict.failure.scenario is None
    return verdict


@pytest.mark.campaign
def test_the_replay_strikes_the_schedules_faults_at_their_times_and_the_dashboard_sees_the_loss(failing):
    with failing.replay() as replay:
        assert replay.faults == [] and replay.lost == 0  # nothing has run yet: the dashboard drives the clock
        replay.run()
        assert replay.cluster.now >= replay.end_ms
        assert replay.faults == failing.failure.faults  # the same faults, at the same simulated ms
        assert replay.lost > 0  # acknowledged records gone, counted by the dashboard as it ran
        assert replay.dashboard.losses.lost == replay.lost
        assert f"seed={failing.failure.seed}" in repr(replay)


@pytest.mark.campaign
def test_the_same_schedule_on_kafkas_rule_loses_nothing(failing):
    with Replay(failing, rules={}) as replay:
        replay.run()
        assert replay.faults and replay.lost == 0


def test_nothing_to_replay_says_why():
    passed = Verdict(("high_watermark",), schedules=30, seed=0, passed=30)
    with pytest.raises(IllegalArgumentError, match="nothing to replay: the verdict has no failing schedule"):
        passed.replay()
