"""A broker's log directory: one ``Log`` per topic-partition (Kafka's ``LogManager``).

Each partition lives in ``<log_dir>/<topic>-<partition>/``. Topic names are validated
before they become directory names, so no name can reach outside ``log_dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from minikafka.storage.log import Log, LogConfig, wall_clock_ms
from minikafka.topic import TopicPartition


class LogManager:
    def __init__(self, log_dir: Path | str, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.log_dir = Path(log_dir)
        self.clock = clock
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._logs: dict[TopicPartition, Log] = {}

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | Mapping[str, Any] | None = None
    ) -> Log:
        tp = TopicPartition(topic, partition)
        log = self._logs.get(tp)
        if log is None:
            path = self.log_dir / tp.dir_name  # validates the name first
            log = self._logs[tp] = Log(path, config, clock=self.clock)
        return log

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get(TopicPartition(topic, partition))

    def load_existing(self, configs: Mapping[str, LogConfig] | None = None) -> list[TopicPartition]:
        """Open every partition directory already on disk (a broker restarting)."""
        opened = []
        for path in sorted(p for p in self.log_dir.iterdir() if p.is_dir()):
            try:
                tp = TopicPartition.from_dir_name(path.name)
            except ValueError:
                continue  # not a partition directory
            self.get_or_create_log(tp.topic, tp.partition, (configs or {}).get(tp.topic))
            opened.append(tp)
        return opened

    def __iter__(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(sorted(self._logs.items()))

    def flush_all(self) -> None:
        for log in self._logs.values():
            log.flush()

    def crash(self, *, lose_unflushed: bool = False) -> None:
        """Release every log without flushing (see ``Log.crash``)."""
        for log in self._logs.values():
            log.crash(lose_unflushed=lose_unflushed)
        self._logs.clear()

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
