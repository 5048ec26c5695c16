"""minikafka's benchmarks: the speed targets of the course, measured (never asserted in tests).

    python -m benchmarks                  all of them; prints the full report, then rewrites the
                                          rows of benchmarks/RESULTS.md's targets it measured
                                          and adds an entry to its log
    python -m benchmarks append read      a subset (only their rows change)
    python -m benchmarks NAME --out PATH  the full report to PATH; RESULTS.md is left alone
    python -m benchmarks --quick          a smoke run with small sizes (~1 min); prints the
                                          report and writes no file unless --out is given

Benchmarks: ``append`` (Log.append against raw os.write), ``read`` (Log.read against raw
os.read), ``recovery`` (opening a 1 GB log with a torn tail, and with no recovery point),
``simulation`` (fault campaigns), ``consumer`` (group rebalances and drains, simulated),
``wire`` (kafka-python and confluent-kafka against a multi-process cluster), ``peer`` (the
same confluent-kafka workloads and a raw Fetch ceiling against minikafka and Tansu, a peer
broker from the optional ``bench`` extra: `pip install -e '.[bench]'`), ``spark`` (the
"minikafka" Spark source against Spark's JSON-lines file source, and end-to-end latency),
``notebooks`` (executing notebooks/*.ipynb; skipped by --quick unless named), ``grading``
(the sandboxed grader on a class of copies of a correct submission; --quick grades 2),
``chaos`` (SIGKILLs of real broker processes under an idempotent acks=all load, every run
judged by the checker, and an acks=1 + unclean-election negative control that must lose;
``MINIKAFKA_BENCH_CHAOS_RUNS`` runs, 20 by default, 1 with --quick), ``transactions`` (the
read-process-write fault campaign with transactions, and its at-least-once control;
``MINIKAFKA_BENCH_TXN_SCHEDULES`` schedules, 1,000 by default, 20 with --quick), ``flood`` (a
well-behaved producer's ack latency while another process floods the broker: pipelined
ApiVersions, pipelined JoinGroups, 10,000 idle connections closed at once).

The machine is shared and noisy, so every figure is the median of a few repeats, shown
with its spread (min-max), and every comparison is a ratio measured in the same run.
Scratch data lives in benchmarks/data/ (git-ignored, same disk as the repository) and is
deleted afterwards.
"""
