"""The physical layer: partitions' logs as segment files on disk (Kafka's ``storage``).

``Log`` (Kafka's UnifiedLog) is what the rest of minikafka uses; ``LogSegment``,
``OffsetIndex`` and ``TimeIndex`` are its parts, shown one at a time in notebook 01.
``LogValidator`` checks what clients append, record by record. ``LogCleaner`` compacts logs whose ``cleanup.policy`` is ``compact``.
"""

from minikafka.storage.cleaner import CleanerStats, LogCleaner
from minikafka.storage.index import OffsetIndex, TimeIndex
from minikafka.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Log,
    LogAppendInfo,
)
from minikafka.storage.log_config import LogConfig
from minikafka.storage.log_loader import RecoveryReport
from minikafka.storage.log_manager import LogManager
from minikafka.storage.log_validator import AppendOrigin, LogValidator
from minikafka.storage.segment import LogSegment

__all__ = [
    "AppendOrigin",
    "CleanerStats",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "Log",
    "LogAppendInfo",
    "LogCleaner",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "LogValidator",
    "OffsetIndex",
    "RecoveryReport",
    "TimeIndex",
]
