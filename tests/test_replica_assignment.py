"""The controller's checks on explicit replica assignments (``minikafka.replica_assignment``),
as pure functions: each of KRaft's rules, its error code and its words
(``ReplicationControlManager.createTopic``, ``createPartitions``,
``validateManualPartitionAssignment``). The same rules through a cluster are in
``test_topic_admin.py`` (simulated) and ``test_wire_admin.py`` (kafka-python, real processes)."""

from __future__ import annotations

import pytest

from minikafka.messages import INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST
from minikafka.replica_assignment import (
    added_partitions_placement,
    topic_placement,
    validate_manual_partition_assignment,
)

REGISTERED = {1, 2, 3, 4}
LIVE = {1, 2, 3}  # broker 4 is registered but fenced


def test_a_valid_assignment_is_written_as_given_isr_its_live_replicas_leader_the_first_of_them():
    placement, refusal = topic_placement([(1, (4, 2)), (0, (1, 2)), (2, (3, 4))], -1, -1, REGISTERED, LIVE)
    assert refusal is None
    # partition order, whatever the request's; broker 4 (fenced) a replica outside the ISR
    assert placement == [((1, 2), (1, 2)), ((4, 2), (2,)), ((3, 4), (3,))]


@pytest.mark.parametrize("assignments, partitions, rf, error, message", [
    ([(0, (1,))], -1, 1, INVALID_REQUEST,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ([(0, (1,))], 1, -1, INVALID_REQUEST,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ([(0, (1,))], 3, 2, INVALID_REQUEST,  # the replication factor is checked first, as in Kafka
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ([(0, (1, 2)), (0, (2, 3))], -1, -1, INVALID_REPLICA_ASSIGNMENT,
     "Found multiple manual partition assignments for partition 0"),
    ([(0, ())], -1, -1, INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
    ([(0, (9, 1, 7))], -1, -1, INVALID_REPLICA_ASSIGNMENT,  # the smallest unknown id: Kafka sorts the list
     "The manual partition assignment includes broker 7, but no such broker is registered."),
    ([(0, (2, 1, 2))], -1, -1, INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 2 more than once."),
    ([(0, (1, 2)), (1, (3,))], -1, -1, INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    ([(0, (1,)), (1, (4,))], -1, -1, INVALID_REPLICA_ASSIGNMENT,
     "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled "
     "shutdown."),
    ([(0, (1,)), (2, (2,))], -1, -1, INVALID_REPLICA_ASSIGNMENT,
     "partitions should be a consecutive 0-based integer sequence"),
    ([(1, (1,))], -1, -1, INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"),
    ([(-1, (1,)), (0, (2,))], -1, -1, INVALID_REPLICA_ASSIGNMENT,
     "partitions should be a consecutive 0-based integer sequence"),
])
def test_each_of_krafts_rules_refuses_with_its_code_and_words(assignments, partitions, rf, error, message):
    assert topic_placement(assignments, partitions, rf, REGISTERED, LIVE) == ([], (error, message))


def test_the_first_list_fixes_the_length_of_the_others():
    refused = topic_placement([(0, (1,)), (1, (1, 2))], -1, -1, REGISTERED, LIVE)
    assert refused[1] == (INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes a partition with 2 "
                          "replica(s), but this is not consistent with previous partitions, which have 1 replica(s).")


def test_an_unknown_broker_is_named_before_a_duplicate_and_rules_apply_in_request_order():
    assert validate_manual_partition_assignment((5, 5), REGISTERED, None) == (
        "The manual partition assignment includes broker 5, but no such broker is registered.")
    # partition 3 is refused for its broker before the gap (no 1, 2) is noticed
    assert topic_placement([(0, (1,)), (3, (8,))], -1, -1, REGISTERED, LIVE)[1] == (
        INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 8, but no such broker is registered.")
    assert validate_manual_partition_assignment((3, 1, 2), REGISTERED, 3) is None


def test_added_partitions_take_one_list_each_as_long_as_the_topics_replication_factor():
    placement, refusal = added_partitions_placement([(4, 1), (3, 2)], 2, 3, 2, REGISTERED, LIVE)
    assert refusal is None and placement == [((4, 1), (1,)), ((3, 2), (3, 2))]
    assert added_partitions_placement([(1, 2)], 2, 3, 2, REGISTERED, LIVE) == ([], (
        INVALID_REPLICA_ASSIGNMENT, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were "
        "specified."))
    assert added_partitions_placement([(1, 2, 3)], 1, 3, 2, REGISTERED, LIVE)[1] == (
        INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes a partition with 3 replica(s), but "
        "this is not consistent with previous partitions, which have 2 replica(s).")
    # numbered after the topic's existing partitions: 3 and 4 here
    assert added_partitions_placement([(1, 2), (4, 4)], 2, 3, 2, REGISTERED, LIVE)[1] == (
        INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 4 more than once.")
    assert added_partitions_placement([(1,), (4,)], 2, 3, 1, REGISTERED, LIVE)[1] == (
        INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual partition assignment for partition 4 are "
        "fenced or in controlled shutdown.")
