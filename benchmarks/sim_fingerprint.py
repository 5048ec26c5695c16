"""A fingerprint of the simulation's behaviour, to prove that a speed-up changed nothing
(issue 16): not part of ``make bench``; run by hand before and after a change, and diff.

    .venv/bin/python -m benchmarks.sim_fingerprint > /tmp/after.txt
    diff benchmarks/sim_fingerprint.txt /tmp/after.txt     # must print nothing

Four campaigns (``fault_campaign``, as the benchmark and the notebooks call it): seeds 1
and 7 with acks='all', idempotent, min.insync.replicas=2, RF 3; one with acks=1; one with
``workload="transactions"``. For each, the campaign's ``table()`` and, per schedule, one
line: its seed and a hash of everything the schedule did that a change could move:

- the checker's operation history: every send (value, partition asked and given, offset,
  status, invoke and completion times, error) and every poll (reader, partition, offsets,
  values, time, final), the final reads; for transactions every transaction's values,
  inputs and outcome, and the final read_committed values;
- the number of simulated events the world processed, its clock at the end, and the
  state of its RNG (every draw of jitter, loss and faults), the nemesis's fault log.

Then a few schedules of each campaign again with ``record_history=True``: a hash of the
world's own event trace (every message received: time, source, destination, type; every
crash, start and drop). The hooks only observe: they wrap ``analyse``, ``judge`` and
``run_cluster`` and call the originals unchanged.
"""

from __future__ import annotations

import hashlib
import sys
from contextlib import contextmanager

from minikafka.checker import campaign as campaign_module
from minikafka.checker import rpw_workload

CAMPAIGNS = [
    ("seed 1, acks=all, idempotent", dict(schedules=100, seed=1, acks="all", min_insync_replicas=2,
                                         replication_factor=3, enable_idempotence=True)),
    ("seed 7, acks=all, idempotent", dict(schedules=100, seed=7, acks="all", min_insync_replicas=2,
                                         replication_factor=3, enable_idempotence=True)),
    ("seed 3, acks=1", dict(schedules=100, seed=3, acks=1)),
    ("seed 1, transactions", dict(schedules=60, seed=1, workload="transactions")),
]
TRACED = 4  # schedules per campaign replayed with the world's event trace


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Recorder:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def install(self) -> None:
        analyse, judge, run_cluster = campaign_module.analyse, rpw_workload.ReadProcessWrite.judge, \
            campaign_module.run_cluster
        recorder = self

        def analyse_hook(history):
            recorder.parts.append(repr(history.sends) + repr(history.polls) + repr(sorted(history.final_reads.items())))
            return analyse(history)

        def judge_hook(self, values):
            recorder.parts.append(repr([(t.number, t.values, t.outcome) for t in self.history.transactions])
                                  + repr(values) + repr(dict(self.faults)))
            return judge(self, values)

        @contextmanager
        def run_cluster_hook(*args, **kwargs):
            with run_cluster(*args, **kwargs) as cluster:
                yield cluster
                w = cluster.world
                recorder.parts.append(f"events={w.events_processed} now={w.now} rng={_h(repr(w.rng.getstate()))}")

        campaign_module.analyse = analyse_hook
        rpw_workload.ReadProcessWrite.judge = judge_hook
        campaign_module.run_cluster = run_cluster_hook

    def take(self) -> str:
        text = "\n".join(self.parts)
        self.parts.clear()
        return text


def main() -> None:
    recorder = Recorder()
    recorder.install()
    out = sys.stdout
    for name, kwargs in CAMPAIGNS:
        report = campaign_module.CampaignReport(kwargs["seed"], kwargs["schedules"], campaign_module._params(
            **{k: v for k, v in kwargs.items() if k not in ("schedules", "seed")}))
        seeds = campaign_module.schedule_seeds(kwargs["seed"], kwargs["schedules"])
        lines = []
        for s in seeds:
            r = campaign_module._run(s, report.params)
            report.add(r)
            lines.append(f"{s} {_h(recorder.take() + repr(r.faults) + repr(r.notes) + repr(sorted(r.counts.items())))}")
        assert report.table() == campaign_module.fault_campaign(**kwargs).table() if "--check" in sys.argv else True
        recorder.take()
        out.write(f"## {name}: {kwargs}\n{report.table()}\n")
        out.write("\n".join(lines) + "\n")
        for s in seeds[:TRACED]:
            r = campaign_module._run(s, report.params, record_history=True)
            recorder.take()
            trace = repr(r.cluster.world.history)
            out.write(f"trace {s} {len(r.cluster.world.history)} events {_h(trace)}\n")
            r.cluster.close()
        out.flush()


if __name__ == "__main__":
    main()
