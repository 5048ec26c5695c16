"""The `minikafka` command: one argparse subcommand per tool.

Theory of operation: `main()` parses argv, dispatches to the subcommand's `run(args)` and returns
its exit code. Each subcommand registers itself in `build_parser()`; later tools (`server`,
`topics`, ...) add a parser and a function the same way. Subcommands import their modules lazily,
so `minikafka --help` stays fast and a tool's dependencies load only when it runs.

Exit codes: 0 success, 1 the command ran and found a problem (`exercises --check` drift, a
failing `check`, a submission `grade` could not grade), 2 usage
errors and inputs that cannot be processed (argparse's own convention).

Default folders are resolved against the project root: the nearest directory, from the current
one upwards, that holds a `pyproject.toml` or a `solutions/` folder (else the current directory).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path


def project_root(start: Path | None = None) -> Path:
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file() or (folder / "solutions").is_dir():
            return folder
    return start


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_exercises(args) -> int:
    from .course.exercises import MarkerError, compare, generate

    root = project_root()
    solutions = args.solutions or root / "solutions"
    exercises = args.exercises or root / "exercises"
    if not solutions.is_dir() and not any(exercises.glob("*.ipynb")):
        print(f"note: {_shown(solutions)} does not exist yet: there is nothing to generate")
        return 0
    only = {Path(n).name for n in args.notebooks} or None
    if only:
        unknown = sorted(n for n in only if not (solutions / n).is_file())
        if unknown:
            print(f"error: no such notebook in {_shown(solutions)}: {', '.join(unknown)}", file=sys.stderr)
            return 2
    try:
        report = (compare(solutions, exercises).only(only) if args.check
                  else generate(solutions, exercises, only))
    except (MarkerError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where = _shown(exercises)
    if args.check:
        for label, names in (("differs", report.differ), ("missing", report.missing),
                             ("extra", report.extra)):
            for name in names:
                print(f"{label}: {where}/{name}")
        if not report.in_sync:
            print(f"{where} is out of date: run `minikafka exercises` (or `make exercises`)")
            return 1
        print(f"{where} is in sync with {_shown(solutions)}")
        return 0
    for label, names in (("updated", report.differ), ("created", report.missing),
                         ("removed", report.extra)):
        for name in names:
            print(f"{label}: {where}/{name}")
    if report.in_sync:
        print(f"{where} was already up to date")
    return 0


def _sanitize_file(args, root: Path) -> Path | None:
    sanitize = args.sanitize or root / "tests" / "nbval-sanitize.cfg"
    if args.sanitize and not sanitize.is_file():
        raise SystemExit(f"error: sanitize file {sanitize} does not exist")
    return sanitize if sanitize.is_file() else None


def run_check(args) -> int:
    from .course.gradebook import format_check, format_json
    from .course.grade import NotGradable, Settings, check_file
    from .course.sandbox import SandboxError, weaker_isolation
    from .platform import sandbox_missing

    if not args.notebook.is_file():
        print(f"error: {args.notebook} does not exist", file=sys.stderr)
        return 2
    root = project_root(args.notebook.resolve().parent)
    settings = Settings(sanitize=_sanitize_file(args, root), cell_timeout=args.timeout, budget=args.budget)
    missing = sandbox_missing()
    if missing:  # said once, before the run: the check is the grader's, its cage is weaker here
        print(weaker_isolation(missing), file=sys.stderr, flush=True)
    try:
        result = check_file(args.notebook, settings)
    except (NotGradable, SandboxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_json([result]) if args.json else format_check(result), end="")
    ok = result.status == "graded" and all(c.passed for e in result.exercises for c in e.checks if not c.hidden)
    return 0 if ok else 1


def _writable_folder(folder: Path) -> str | None:
    """Make ``folder`` (and its parents) if need be; why it cannot hold the grader's files, or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"{folder} is a file, not a folder"
    except OSError as e:
        return f"cannot make the folder {folder} ({e.strerror or e})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


def run_grade(args) -> int:
    from .course.gradebook import (default_jobs, format_json, format_table, grade_all, write_csv,
                                   write_feedback)
    from .course.grade import Settings, default_seed
    from .course.sandbox import isolation

    root = project_root()
    reference = args.reference or root / "solutions"
    for label, path in (("submission", args.path), ("reference folder", reference)):
        if not path.exists():
            print(f"error: {label} {path} does not exist", file=sys.stderr)
            return 2
    # Where the gradebook and the feedback go, made (or refused) before hours of grading, not after.
    for option, path, folder in (("--csv", args.csv, args.csv and args.csv.parent),
                                 ("--feedback", args.feedback, args.feedback)):
        problem = folder is not None and _writable_folder(folder)
        if problem:
            print(f"error: {option} {path}: {problem}", file=sys.stderr)
            return 2
    if args.csv is not None and args.csv.is_dir():
        print(f"error: --csv {args.csv} is a folder; give a file name, e.g. {args.csv / 'grades.csv'}", file=sys.stderr)
        return 2
    # The project's own solutions/ stay hidden from the sandbox too, whatever --reference says.
    hide = tuple(p for p in (root / "solutions",) if p.is_dir())
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    try:
        property_seed = args.property_seed if args.property_seed is not None else default_seed()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings = Settings(sanitize=_sanitize_file(args, root), cell_timeout=args.timeout, budget=args.budget,
                        hide=hide, seed=seed, property_seed=property_seed)
    jobs = args.jobs or default_jobs()
    print(isolation(), file=sys.stderr)
    print(f"hidden checks' campaign seed: {seed} (replay this grading with --seed {seed})", file=sys.stderr)
    print(f"hidden properties' seed: {property_seed} (replay their draws with --property-seed {property_seed})",
          file=sys.stderr)
    results = grade_all(args.path, reference, settings, jobs=jobs, assignment=args.assignment,
                        progress=not args.quiet and sys.stderr.isatty() or args.progress)
    # The files first: nothing printed afterwards can lose them. A name or message the terminal
    # cannot encode (a lone surrogate) is printed escaped, never the end of the run.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if args.csv:
        write_csv(results, args.csv)
    if args.feedback:
        written = write_feedback(results, args.feedback)
    print(format_json(results) if args.json else format_table(results), end="")
    if args.csv:
        print(f"gradebook: {_shown(args.csv)}", file=sys.stderr)
    if args.feedback:
        print(f"feedback: {len(written)} file(s) in {_shown(args.feedback)}", file=sys.stderr)
    errors = [r for r in results if r.status == "error"]
    if errors:
        print(f"{len(errors)} submission(s) could not be graded (status 'error')", file=sys.stderr)
    return 1 if errors else 0


def run_release(args) -> int:
    from .course.release import ReleaseError, release

    try:
        written = release(project_root(), args.out, force=args.force)
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"student release in {_shown(args.out)}: {written} files (no solutions/, no hidden checks)")
    return 0


def _overrides(args) -> dict[str, str]:
    from .wire.process import parse_config

    return parse_config(args.override)


def _cluster_secret(args) -> bytes | None:
    """The inter-node listeners' secret: from --cluster-secret-file, else from the launcher's
    environment (``MINIKAFKA_CLUSTER_SECRET``); never from the command line, which ``ps`` shows."""
    from .wire import auth

    from_env = auth.from_environment()  # popped either way: no grandchild inherits it
    return auth.load(args.cluster_secret_file) if args.cluster_secret_file is not None else from_env


def run_server(args) -> int:
    from .errors import IllegalArgumentError
    from .platform import PlatformNotSupported, require_real_processes

    try:
        require_real_processes(f"`minikafka {args.command}`")
    except PlatformNotSupported as e:
        print(f"minikafka {args.command}: {e}", file=sys.stderr)
        return 2
    try:
        return _run_server(args)
    except IllegalArgumentError as e:
        print(f"minikafka server: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        return _port_taken("server", e, "--port" if args.controller_quorum_voters else "--port, --controller-port")


def _node_rules(args, node_id: int, controller: bool):
    """The ``Rules`` of this node: a student's from ``--rules-file`` (``wire/node_rules.py``),
    labelled as the simulated cluster labels its nodes (2, "controller 3000"); or None (Kafka's)."""
    if args.rules_file is None:
        return None
    from .wire import node_rules

    label = f"controller {node_id}" if controller else node_id
    return node_rules.node_rules(args.rules_file, label,
                                 node_rules.error_file(args.rules_file.parent, node_id, controller))


def _run_server(args) -> int:
    from .messages import CONTROLLER_ID
    from .wire.process import die_with_parent, parse_voters, run_broker, run_combined

    if args.exit_with_parent:
        die_with_parent()
    _log_to_stderr(args.log_level)
    secret = _cluster_secret(args)
    if args.controller_quorum_voters is None:  # alone: Kafka 4's quickstart, combined mode
        controller_port = args.controller_port if args.controller_port is not None else args.port + 1
        print(f"minikafka: broker {args.broker_id} on {args.host}:{args.port}, its controller (a one-node "
              f"quorum, combined mode) on {args.host}:{controller_port}; data in {args.log_dir}", file=sys.stderr,
              flush=True)
        run_combined(args.broker_id, args.host, args.port, controller_port, args.log_dir, _overrides(args),
                     secret=secret, rules=_node_rules(args, args.broker_id, False),
                     controller_rules=_node_rules(args, CONTROLLER_ID, True))
    else:
        run_broker(args.broker_id, args.host, args.port, args.log_dir, parse_voters(args.controller_quorum_voters),
                   _overrides(args), inter_broker_port=args.inter_broker_port, secret=secret,
                   rules=_node_rules(args, args.broker_id, False))
    return 0


def run_controller(args) -> int:
    from .errors import IllegalArgumentError
    from .platform import PlatformNotSupported, require_real_processes

    try:
        require_real_processes(f"`minikafka {args.command}`")
    except PlatformNotSupported as e:
        print(f"minikafka {args.command}: {e}", file=sys.stderr)
        return 2
    try:
        return _run_controller(args)
    except IllegalArgumentError as e:
        print(f"minikafka controller: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        return _port_taken("controller", e, "--port")


def _port_taken(command: str, e: OSError, flags: str) -> int:
    """A listener's port is taken (by another server; on a shared machine, perhaps another
    user's): one line that says so, not a traceback. Any other OSError is raised again."""
    import errno

    if e.errno != errno.EADDRINUSE:
        raise e
    print(f"minikafka {command}: {e.strerror} (another process listens there: another server, or on a "
          f"shared machine another user's): choose free ports ({flags})", file=sys.stderr)
    return 2


def _run_controller(args) -> int:
    from .wire.process import die_with_parent, parse_voters, run_controller as serve

    if args.exit_with_parent:
        die_with_parent()
    _log_to_stderr(args.log_level)
    serve(args.node_id, args.host, args.port, args.log_dir, parse_voters(args.controller_quorum_voters),
          _overrides(args), secret=_cluster_secret(args), rules=_node_rules(args, args.node_id, True))
    return 0


def run_cluster(args) -> int:
    import signal
    import time

    from .wire.process import LocalCluster

    from .errors import IllegalArgumentError
    from .platform import PlatformNotSupported

    try:
        cluster = LocalCluster(args.brokers, controllers=args.controllers, base_port=args.base_port,
                               host=args.host, dir=args.dir, config=_overrides(args))
    except PlatformNotSupported as e:
        print(f"minikafka cluster up: {e}", file=sys.stderr)
        return 2
    except (IllegalArgumentError, OSError) as e:
        print(f"minikafka cluster up: {e}", file=sys.stderr)
        return 1
    with cluster:
        # The handlers go in before the cluster is announced: whoever reads the announcement
        # may signal us at once, and must find us ready to stop cleanly (not killed by it).
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        # A shell that starts us in the background without job control hands us SIGINT
        # ignored; Ctrl-C (or `kill -INT`) must still stop the cluster.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            print(f"bootstrap servers: {cluster.bootstrap_servers}", flush=True)
            print(f"controller quorum voters: {', '.join(f'{c}@{h}:{p}' for c, (h, p) in cluster.voters.items())}",
                  flush=True)
            print(f"log directories under {cluster.dir}; Ctrl-C stops every process", flush=True)
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def _log_to_stderr(level: str) -> None:
    import logging

    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _add_process_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind and advertise (default: 127.0.0.1)")
    p.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="a broker config (Kafka's name, e.g. min.insync.replicas=2); repeatable")
    p.add_argument("--log-level", default="warning", help="logging level on stderr (default: warning)")
    p.add_argument("--cluster-secret-file", type=Path, default=None, metavar="FILE",
                   help="the cluster secret (hex) that inter-node connections must prove they know, as "
                        "`minikafka cluster up` writes it to DIR/cluster.secret (default: $MINIKAFKA_CLUSTER_SECRET; "
                        "a combined-mode server makes its own)")
    # launch() passes it: the child dies with the Python process that started it.
    p.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rules-file", type=Path, default=None, metavar="FILE",
                   help="run on a student's rules, as launch(rules=...) writes them to DIR/rules.pickle "
                        "(pickled code: only a file your own launch wrote; default: Kafka's rules)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ex = commands.add_parser("exercises", help="generate exercises/ from solutions/",
                             description="Regenerate exercises/ from solutions/: solution regions "
                             "become NotImplementedError stubs; outputs and cell ids stay.")
    ex.add_argument("notebooks", nargs="*", metavar="NOTEBOOK",
                    help="only these notebooks (file names or paths, e.g. 04-replication-and-isr.ipynb); "
                    "default: all")
    ex.add_argument("--solutions", type=Path, metavar="DIR",
                    help="solutions folder (default: solutions/ in the project root)")
    ex.add_argument("--exercises", type=Path, metavar="DIR",
                    help="exercises folder (default: exercises/ in the project root)")
    ex.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 and name the files that differ, are missing, "
                    "or are extra")
    ex.set_defaults(run=run_exercises)

    ck = commands.add_parser("check", help="check your exercise notebook (what the grader will say)",
                             description="Run your exercise notebook in a fresh sandboxed kernel and "
                             "say, per exercise, whether your code gives the expected outputs. The "
                             "outputs saved in the file never count, so saving cannot change the verdict.")
    ck.add_argument("notebook", type=Path, metavar="NOTEBOOK", help="e.g. exercises/01-the-log.ipynb")
    ck.add_argument("--json", action="store_true", help="print JSON instead of words")
    ck.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="CPU seconds a cell may use (default: the notebook's, else 30); a cell that waits "
                         "without using CPU is stopped after 10x as long on the clock")
    ck.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="CPU seconds for the whole notebook (default: the notebook's, else 120; "
                         "10x as long on the clock)")
    ck.add_argument("--sanitize", type=Path, metavar="FILE", help=argparse.SUPPRESS)
    ck.set_defaults(run=run_check)

    gr = commands.add_parser("grade", help="grade submitted exercise notebooks into a gradebook",
                             description="Grade one submitted .ipynb, or every .ipynb under a "
                             "folder (one sub-folder per student), against solutions/, each in a "
                             "sandboxed kernel. Exit code 1 if any submission could not be graded.")
    gr.add_argument("path", type=Path, metavar="PATH", help="a submission, or a folder of them")
    gr.add_argument("--reference", type=Path, metavar="DIR",
                    help="reference solutions folder (default: solutions/ in the project root)")
    gr.add_argument("--assignment", metavar="NN-name",
                    help="grade every file as this notebook, whatever its name (e.g. 01-the-log)")
    gr.add_argument("--csv", type=Path, metavar="FILE",
                    help="write the gradebook: one row per student and exercise")
    gr.add_argument("--feedback", type=Path, metavar="DIR",
                    help="write one Markdown feedback file per student into DIR")
    gr.add_argument("--json", action="store_true", help="print JSON instead of a table")
    gr.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="CPU seconds a cell may use (default: the notebook's, else 30); a cell that waits "
                         "without using CPU is stopped after 10x as long on the clock")
    gr.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="CPU seconds per submission (default: the notebook's, else 120; "
                         "10x as long on the clock)")
    gr.add_argument("--seed", type=int, default=None, metavar="N",
                    help="the hidden checks' campaign seed (default: $MINIKAFKA_GRADING_SEED, else a new one, printed; "
                         "give it to replay a grading)")
    gr.add_argument("--property-seed", type=int, default=None, metavar="N",
                    help="the hidden properties' seed, which draws their inputs (default: $MINIKAFKA_GRADING_SEED, "
                         "else a new one, printed; never sent to a submission; give it to replay their draws)")
    gr.add_argument("--jobs", "-j", type=int, default=0, metavar="N",
                    help="grade N submissions at once (default: the number of cores)")
    gr.add_argument("--progress", action="store_true", help="show the progress bar even when not a terminal")
    gr.add_argument("--quiet", action="store_true", help="no progress bar")
    gr.add_argument("--sanitize", type=Path, metavar="FILE",
                    help="nbval sanitize file (default: tests/nbval-sanitize.cfg, if present)")
    gr.set_defaults(run=run_grade)

    rl = commands.add_parser("release", help="build the students' copy of the course",
                             description="Copy what students get into OUT: lectures, exercises "
                             "(no hidden checks), the package and its setup files; never solutions/.")
    rl.add_argument("out", type=Path, metavar="OUT")
    rl.add_argument("--force", action="store_true", help="replace OUT if it exists")
    rl.set_defaults(run=run_release)

    sv = commands.add_parser("server", help="run one broker process (the Kafka protocol over TCP)",
                             description="Run one minikafka broker: the same state machine as the "
                             "simulated cluster's, serving the Kafka protocol on --port. Alone (no "
                             "--controller-quorum-voters) it runs Kafka 4's combined mode: the broker and "
                             "a one-node controller quorum in one process, ready for any client; run it "
                             "again on the same --log-dir and every topic is back.")
    sv.add_argument("--broker-id", type=int, default=1, metavar="N", help="node.id (default: 1)")
    sv.add_argument("--port", type=int, default=9092, help="the client listener (default: 9092)")
    sv.add_argument("--inter-broker-port", type=int, default=None, metavar="PORT",
                    help="the inter-broker listener, where other nodes (followers) connect; registered with "
                         "the controller (default: a free port)")
    sv.add_argument("--log-dir", type=Path, required=True, metavar="DIR", help="log.dirs: partitions and metadata")
    sv.add_argument("--controller-quorum-voters", metavar="ID@HOST:PORT,...",
                    help="the metadata quorum's controllers, e.g. 3000@127.0.0.1:9093,3001@127.0.0.1:9094 "
                    "(default: none, combined mode with a controller of its own)")
    sv.add_argument("--controller-port", type=int, default=None, metavar="PORT",
                    help="combined mode: the controller listener (default: --port + 1)")
    _add_process_options(sv)
    sv.set_defaults(run=run_server)

    ct = commands.add_parser("controller", help="run one controller process (a voter of the metadata quorum)",
                             description="Run one KRaft controller: a voter of the Raft quorum that keeps "
                             "the metadata log __cluster_metadata; the active one decides leaders and ISRs.")
    ct.add_argument("--node-id", type=int, required=True, metavar="N", help="its node.id, one of the voters")
    ct.add_argument("--port", type=int, default=9093, help="the controller listener: other nodes only (default: 9093)")
    ct.add_argument("--log-dir", type=Path, required=True, metavar="DIR", help="where its metadata log lives")
    ct.add_argument("--controller-quorum-voters", required=True, metavar="ID@HOST:PORT,...",
                    help="every voter, this one included")
    _add_process_options(ct)
    ct.set_defaults(run=run_controller)

    cl = commands.add_parser("cluster", help="start a local multi-process cluster",
                             description="`minikafka cluster up`: a controller quorum and N broker "
                             "processes on this machine; prints the bootstrap servers.")
    cl.add_argument("action", choices=["up"], help="up: start the cluster and run until Ctrl-C")
    cl.add_argument("--brokers", type=int, default=3, metavar="N", help="broker processes, ids 1..N (default: 3)")
    cl.add_argument("--controllers", type=int, default=3, metavar="N",
                    help="controller processes, the voters of the metadata quorum (default: 3)")
    cl.add_argument("--base-port", type=int, default=None, metavar="PORT",
                    help="brokers on PORT, PORT+1, ...; the controllers after them; refused if any is "
                         "in use (default: free ports)")
    cl.add_argument("--dir", type=Path, default=None, metavar="DIR",
                    help="log directories go here, one per process; created if missing; kept on exit "
                         "(default: a temporary one, removed on exit)")
    cl.add_argument("--host", default="127.0.0.1", help="address every process binds and advertises "
                                                          "(default: 127.0.0.1)")
    cl.add_argument("--override", action="append", metavar="KEY=VALUE",
                    help="a broker/controller config for every process, e.g. num.partitions=3 (repeatable)")
    cl.set_defaults(run=run_cluster)
    from .tools import register as register_kafka_tools  # topics, console-producer/-consumer, consumer-groups
    register_kafka_tools(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # as typed: the tools quote it back
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
