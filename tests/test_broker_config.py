"""BrokerConfig: Kafka's names and defaults, coercion of string values, topic overrides."""

import pytest

from minikafka.broker.config import DEFAULTS, LOG_KEYS, TOPIC_KEYS, BrokerConfig, validate
from minikafka.cluster import Cluster
from minikafka.errors import BrokerResponseError, IllegalArgumentError
from minikafka.storage import LogConfig

KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "delete.retention.ms": 86_400_000,
    "min.compaction.lag.ms": 0,
    "log.cleaner.enable": True,
    "log.cleaner.backoff.ms": 15_000,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.segment.bytes": 104_857_600,
    "offsets.retention.minutes": 10_080,
    "offsets.retention.check.interval.ms": 600_000,
    "offsets.commit.timeout.ms": 5_000,
    "offset.metadata.max.bytes": 4_096,
    "group.initial.rebalance.delay.ms": 3_000,
    "group.min.session.timeout.ms": 6_000,
    "group.max.session.timeout.ms": 1_800_000,
    "group.max.size": 2_147_483_647,
}


def test_new_keys_have_kafkas_defaults():
    config = BrokerConfig()
    for key, value in KAFKA_DEFAULTS.items():
        assert config[key] == value and type(config[key]) is type(value), key
    # the log keys' broker defaults are LogConfig's, so the two cannot drift apart
    assert BrokerConfig().log_config({}) == LogConfig()


def test_topic_keys():
    assert {"cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms"} <= TOPIC_KEYS
    assert set(LOG_KEYS) <= TOPIC_KEYS <= set(DEFAULTS)
    # broker-wide settings are not topic settings
    with pytest.raises(IllegalArgumentError, match="unknown config 'log.cleaner.enable'"):
        BrokerConfig().for_topic({"log.cleaner.enable": "false"})
    with pytest.raises(IllegalArgumentError, match="unknown config 'offsets.topic.num.partitions'"):
        validate({"offsets.topic.num.partitions": 1}, allowed=TOPIC_KEYS)


@pytest.mark.parametrize(
    "given, canonical",
    [
        ("delete", "delete"),
        ("compact", "compact"),
        ("compact,delete", "compact,delete"),
        ("delete,compact", "compact,delete"),
        (" delete , compact ", "compact,delete"),
        ("compact,compact", "compact"),
        (["delete", "compact"], "compact,delete"),
        (("compact",), "compact"),
    ],
)
def test_cleanup_policy_is_a_list_kept_in_canonical_form(given, canonical):
    assert BrokerConfig({"cleanup.policy": given})["cleanup.policy"] == canonical
    assert BrokerConfig().for_topic({"cleanup.policy": given})["cleanup.policy"] == canonical


@pytest.mark.parametrize(
    "bad", ["shred", "", " ", "compact;delete", "compact,", "Compact", 1, None, True, ["compact", 2], []]
)
def test_bad_cleanup_policy_is_refused_naming_the_key(bad):
    with pytest.raises(IllegalArgumentError, match=r"cleanup\.policy must be delete, compact or both") as info:
        BrokerConfig({"cleanup.policy": bad})
    assert repr(bad) in str(info.value)
    with pytest.raises(IllegalArgumentError, match=r"cleanup\.policy"):
        BrokerConfig().for_topic({"cleanup.policy": bad})


def test_strings_are_coerced_to_each_keys_type():
    config = BrokerConfig({
        "log.cleaner.enable": "false",
        "log.cleaner.backoff.ms": "100",
        "offsets.topic.num.partitions": "3",
        "group.max.size": "250",
        "delete.retention.ms": "0",
        "cleanup.policy": "compact",
    })
    assert config["log.cleaner.enable"] is False
    assert config["log.cleaner.backoff.ms"] == 100
    assert config["offsets.topic.num.partitions"] == 3
    assert config["group.max.size"] == 250
    assert config["delete.retention.ms"] == 0
    assert config["cleanup.policy"] == "compact"
    assert BrokerConfig({"log.cleaner.enable": "TRUE"})["log.cleaner.enable"] is True
    with pytest.raises(IllegalArgumentError, match="log.cleaner.enable must be true or false, not 'yes'"):
        BrokerConfig({"log.cleaner.enable": "yes"})
    with pytest.raises(IllegalArgumentError, match="offsets.commit.timeout.ms must be an integer, not '5s'"):
        BrokerConfig({"offsets.commit.timeout.ms": "5s"})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("min.insync.replicas", 0, "min.insync.replicas must be >= 1, not 0"),
        ("offsets.topic.num.partitions", "0", "offsets.topic.num.partitions must be >= 1, not 0"),
        ("offsets.topic.replication.factor", 0, "offsets.topic.replication.factor must be >= 1, not 0"),
        ("log.cleaner.backoff.ms", -1, "log.cleaner.backoff.ms must be >= 0, not -1"),
        ("delete.retention.ms", "-1", "delete.retention.ms must be >= 0, not -1"),
        ("min.compaction.lag.ms", -5, "min.compaction.lag.ms must be >= 0, not -5"),
        ("group.max.size", 0, "group.max.size must be >= 1, not 0"),
    ],
)
def test_values_below_kafkas_minimum_are_refused(key, value, message):
    with pytest.raises(IllegalArgumentError, match=message):
        BrokerConfig({key: value})


def test_topic_override_reaches_the_log_config():
    broker = BrokerConfig({"delete.retention.ms": 1_000})
    log_config = broker.log_config(
        {"cleanup.policy": "compact", "min.compaction.lag.ms": "500", "segment.bytes": "4096"}
    )
    assert isinstance(log_config, LogConfig)
    assert log_config.cleanup_policy == "compact"
    assert log_config.min_compaction_lag_ms == 500
    assert log_config.delete_retention_ms == 1_000  # the broker's default, not overridden
    assert log_config.segment_bytes == 4096
    assert broker.log_config({"cleanup.policy": "delete,compact"}).cleanup_policy == "compact,delete"
    assert broker.log_config({}).cleanup_policy == "delete"
    # a broker-wide default applies to every topic that does not override it
    compacting = BrokerConfig({"cleanup.policy": "compact"})
    assert compacting.log_config({}).cleanup_policy == "compact"
    assert compacting.log_config({"cleanup.policy": "delete"}).cleanup_policy == "delete"


def test_existing_behaviour_is_kept():
    config = BrokerConfig({"min.insync.replicas": "2", "unclean.leader.election.enable": "true"})
    assert config["min.insync.replicas"] == 2 and config["unclean.leader.election.enable"] is True
    with pytest.raises(IllegalArgumentError, match="unknown config 'retention.msec'; known: "):
        BrokerConfig({"retention.msec": 1})
    partition = config.partition_config({"min.insync.replicas": "3"})
    assert partition.min_insync_replicas == 3 and partition.unclean_leader_election


def test_create_topic_with_compact_policy(tmp_path):
    with Cluster(1, dir=tmp_path / "cluster") as c:
        c.create_topic("offsets", 1, 1, config={"cleanup.policy": "compact", "delete.retention.ms": 10})
        log = c.replica(1, "offsets", 0).log
        assert (log.config.cleanup_policy, log.config.delete_retention_ms) == ("compact", 10)
        with pytest.raises(BrokerResponseError, match="cleanup.policy must be delete, compact or both"):
            c.create_topic("bad", 1, 1, config={"cleanup.policy": "shred"})
        assert c.topics() == ["offsets"]
