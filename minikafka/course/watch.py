"""The grader's watch: the package's own implementation must not run inside a student's function.

Theory of operation
-------------------
The kernel that runs a submission also runs the student's code, so whatever the watch keeps in
the kernel's objects a student's function can reach and change: the old watch, an object in the
notebook's globals, was beaten by emptying its ``forbidden`` set, or by saving its trace
function, switching tracing off and putting it back. This watch keeps nothing a student's code
can reach. It is an *audit hook* (PEP 578), installed by the program's first cell
(``seal_cell``), before any cell of the notebook runs. An audit hook cannot be removed, and its
state lives only in its closure:

- **What must not run** is read once, at that first cell: every code object of the package's
  implementations the grading will watch (``specs``), before the student's code could patch a
  module. A later ``minikafka.partitioner.murmur2 = ...`` changes nothing the watch holds.
- **Seeing calls.** The trace function the hook installs is ``lambda frame, event, arg:
  frame.f_code and None``: it holds nothing. Reading a frame's ``f_code`` raises the audit event
  ``object.__getattr__``, so the hook sees every Python call while armed (around a check,
  every call running in the globals of a module that holds watched code; the grader arms it
  around the checks that need it, ``grade._needs_watch``), and records a *hit*
  when the call runs the package's implementation (the code object, or an equal one: a
  ``FunctionType`` copy). Around a check, a hit counts when a function the exercise defines is on
  the stack (the checks themselves run the package); around a property's call cell (``strict``)
  any run of it counts, whoever called it: nothing in a call cell needs it.
- **Refused for good**, from the first cell on, because they would let a function switch the
  watch off or reach the hook's state: ``sys.settrace``, ``sys.setprofile`` (save, switch off,
  restore; or a tracer of the student's own, which would see the hook's frames),
  ``sys.addaudithook`` (a hook of the student's would see the verdicts), ``gc``'s object walks,
  ``sys._current_frames``, ``sys.monitoring.register_callback`` and replacing the trace function's
  code. A second hook, ``gate``, raises ``RuntimeError`` for them; it holds nothing but constants,
  since its frame is in the traceback of what it refuses. The watch's own hook notes each attempt
  (the next verdict fails with it) and never raises, so its frame never reaches a traceback: a
  ``KeyboardInterrupt`` (the grader's time limit) that lands in it is raised again in the caller.
- **Verdicts the kernel cannot forge.** Cells talk to the hook by raising the audit event
  ``minikafka.grader.watch`` ("arm", "verdict"). A verdict asked from inside a watched function,
  or from another thread, is refused and noted. The hook signs each verdict (HMAC-SHA256 with a
  key held only in the hook's closure) together with the call's nonce and the answer printed with
  it, and what it was armed over (``armed_text``: a verdict on a watch armed over nothing, by a
  patched ``sys.audit``, does not verify). The key is never in a cell's source or output, which the kernel keeps where a later cell can
  read it (``linecache``, ``In``, the last execution's info): the first cell holds the grader's
  half of a Diffie-Hellman exchange (RFC 3526's 2048-bit group, ``Handshake``) and prints the
  kernel's half, and each side computes the key from the other's public number. The grader
  accepts a verdict only with a good signature (``verified``), so a ``print`` override, an input
  transformer that rewrites a verdict cell, or a replayed line earns nothing: they can drop a
  verdict, never make one.

What this does not reach: the package's code run in another thread or process (tracing is per
thread), and memory written through ``ctypes``. A right answer still has to be Kafka's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

EVENT = "minikafka.grader.watch"
SEAL_MARK = "@minikafka-seal:"  # before the kernel's public number, in the first cell's output
# RFC 3526's 2048-bit MODP group (group 14): its prime and generator.
P = int("FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
        "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
        "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"
        "83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
        "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA0510"
        "15728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)
G = 2

# Runs in the kernel, as the program's first cell, before any code of the notebook. Everything it
# keeps is in _minikafka_seal's closure; the names it leaves in the notebook are deleted.
_SEAL = r'''
def _minikafka_seal(specs, theirs):
    import sys, types, importlib, _thread, hashlib, os
    settrace, gettrace, getframe = sys.settrace, sys.gettrace, sys._getframe
    ident, interrupt_main = _thread.get_ident, _thread.interrupt_main
    addaudithook, sha256 = sys.addaudithook, hashlib.sha256
    Frame, Function, Code = types.FrameType, types.FunctionType, types.CodeType
    class_dict = type.__dict__["__dict__"].__get__
    EVENT = %(event)r
    REFUSED = frozenset(("sys.settrace", "sys.setprofile", "sys.addaudithook", "gc.get_objects", "gc.get_referrers",
                         "gc.get_referents", "sys._current_frames", "sys.monitoring.register_callback"))
    PLAIN = (int, float, complex, str, bytes, bool, type(None), type(...))
    # Reading f_code is what the hook sees. Around a property's call every frame is read; around
    # the checks (the package's clusters and campaigns run there) only a frame running in the
    # globals of a module that holds watched code (a copy with other globals is caught by arm,
    # and by the property's strict watch).
    trace = eval("lambda frame, event, arg: frame.f_code and None", {"__builtins__": {}})
    trace_homes = eval("lambda frame, event, arg, homes=None, id=None: "
                       "None if id(frame.f_globals) not in homes else (frame.f_code and None)", {"__builtins__": {}})
    inside, notes, armed = set(), [], []
    secret = int.from_bytes(os.urandom(32), "big") | 1 << 255  # the kernel's half, gone on return
    print(%(mark)r + format(pow(%(g)d, secret, %(p)d), "x"), flush=True)
    key = sha256(pow(theirs, secret, %(p)d).to_bytes(256, "big")).digest().ljust(64, b"\0")  # HMAC's block
    del secret
    inner, outer = bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)

    def sign(text):
        return sha256(outer + sha256(inner + text.encode()).digest()).hexdigest()

    def package_codes(obj, seen):  # the package's objects, read before any student code ran
        obj = getattr(obj, "__func__", obj)
        if isinstance(obj, type):
            for value in list(vars(obj).values()):
                yield from package_codes(value, seen)
            return
        obj = getattr(obj, "__wrapped__", obj)
        code = obj if isinstance(obj, Code) else getattr(obj, "__code__", None)
        if isinstance(getattr(obj, "__globals__", None), dict):
            homes.add(id(obj.__globals__))
        if isinstance(code, Code) and id(code) not in seen:
            seen.add(id(code))
            yield code
            for const in code.co_consts:
                if isinstance(const, Code):
                    yield from package_codes(const, seen)

    def own_codes(obj, seen):  # the student's functions and classes: exact types only, none of their code runs
        kind = type(obj)
        if kind is staticmethod or kind is classmethod:
            obj = obj.__func__
            kind = type(obj)
        if kind is property:
            for part in (obj.fget, obj.fset, obj.fdel):
                yield from own_codes(part, seen)
            return
        if issubclass(kind, type):  # (not isinstance: it reads a __class__ the student's object may define)
            for value in list(class_dict(obj).values()):
                yield from own_codes(value, seen)
            return
        code = obj.__code__ if kind is Function else obj if kind is Code else None
        if code is not None and id(code) not in seen:
            seen.add(id(code))
            yield code
            for const in code.co_consts:
                if type(const) is Code:
                    yield from own_codes(const, seen)

    def plain(values):
        return all(type(v) in PLAIN or (type(v) in (tuple, frozenset) and plain(v)) for v in values)

    # A student's code object may hold str subclasses (its name, its names) whose hash or == is
    # their code: nothing of theirs may run inside the hook. So tables are keyed by the package's
    # code objects' ids (kept alive in the snapshot), and a copy is compared only when every part
    # of it is of an exact built-in type.
    def exact(code):
        return (type(code.co_name) is str and type(code.co_code) is bytes and plain(code.co_consts)
                and type(code.co_names) is tuple and all(type(n) is str for n in code.co_names))

    def match(table, code):
        found = table.get(id(code))
        if found is not None:
            return found[1]
        if exact(code):
            key = (code.co_code, code.co_consts, code.co_names)
            for ref, ref_spec in table.values():
                if (ref.co_code, ref.co_consts, ref.co_names) == key:
                    return ref_spec
        return None

    # A rule past its budget is stopped by the cells' time limit here: minikafka.deadline's stop of
    # a rule that catches everything takes the trace function, which this seal refuses.
    importlib.import_module("minikafka.deadline").CATCH_ALL = False
    snapshot, homes = {}, set()
    for spec in specs:
        module, _, qualname = spec.partition(":")
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        for code in package_codes(obj, set()):
            if not code.co_name.startswith("<"):  # <listcomp>, <lambda>: alike everywhere
                snapshot.setdefault(spec, []).append(code)
    trace_homes.__defaults__ = (frozenset(homes), id)

    def judge(frame):
        watch = armed[0]
        code = frame.f_code
        if type(code.co_name) is not str:  # not the package's (see match)
            return
        table = watch["forbidden"].get(code.co_name)
        if not table:
            return
        spec = match(table, code)
        if spec is None or spec in watch["hits"]:
            return
        if not watch["strict"]:
            caller = frame.f_back
            while caller is not None and id(caller.f_code) not in watch["mine"]:
                caller = caller.f_back
            if caller is None:
                return
        watch["hits"].append(spec)

    def arm(wanted, names, objects, strict):
        # What it was asked to watch, as the grader asked it (watch.armed_text): the verdict signs
        # it, so an arm rewritten on its way here (a patched sys.audit) signs something else.
        asked = repr((list(wanted), list(names), strict))
        if armed:
            notes.append("the grader's watch was armed again while it watched")
            return
        forbidden = {}
        for spec in wanted:
            for code in snapshot.get(spec, ()):
                forbidden.setdefault(code.co_name, {})[id(code)] = (code, spec)
        mine, keep, copies = set(), [], []
        for name, obj in zip(names, objects):  # (looked up by the arm cell, outside the hook)
            keep.append(obj)
            for code in own_codes(obj, set()):
                mine.add(id(code))
                keep.append(code)
                spec = match(forbidden.get(code.co_name) or {}, code) if type(code.co_name) is str else None
                if spec is not None:
                    copies.append(f"{name} is a copy of {spec}")
        armed.append({"thread": ident(), "forbidden": forbidden, "mine": mine, "keep": keep, "asked": asked,
                      "hits": copies, "strict": strict, "trace": trace if strict else trace_homes})
        settrace(armed[0]["trace"])

    def verdict(out, nonce, answer):
        if not armed:
            out.append("the grader's watch was not armed")
            return
        watch = armed[0]
        if watch["thread"] != ident():
            notes.append("the watch's verdict was asked from another thread")
            return
        frame = getframe(0)
        while frame is not None:
            if id(frame.f_code) in watch["mine"]:
                notes.append("the watch's verdict was asked from inside your function")
                return
            frame = frame.f_back
        if gettrace() is not watch["trace"]:
            notes.append("tracing stopped while the watch was armed (an exception in tracing?)")
        settrace(None)
        armed.clear()
        if watch["hits"]:
            said = "runs minikafka's own code: " + ", ".join(watch["hits"])
        elif notes:
            said = "the grader's watch was tampered with: " + "; ".join(dict.fromkeys(notes))
        else:
            said = "ok"
        notes.clear()
        out.append(said)
        out.append(sign(nonce + "\n" + said + "\n" + answer + "\n" + watch["asked"]))

    def control(args):
        op = args[0] if args else None
        if op == "arm" and len(args) == 5 and type(args[1]) is list and type(args[2]) is list \
                and type(args[3]) is list and len(args[3]) == len(args[2]) and type(args[4]) is bool \
                and all(type(s) is str for s in args[1] + args[2]):
            arm(args[1], args[2], args[3], args[4])
        elif op == "verdict" and len(args) == 4 and type(args[1]) is list and type(args[2]) is str \
                and type(args[3]) is str:
            verdict(args[1], args[2], args[3])

    def watch_hook(event, args):  # never raises: its frame must never reach a traceback
        tid = ident()
        if tid in inside:  # the hook's own reads and calls
            return
        interrupted = False
        try:
            if event == "object.__getattr__":
                if armed and len(args) == 2 and type(args[1]) is str and args[1] == "f_code" \
                        and type(args[0]) is Frame:
                    inside.add(tid)
                    try:
                        judge(args[0])
                    finally:
                        inside.discard(tid)
            elif event == EVENT:
                inside.add(tid)
                try:
                    control(args)
                finally:
                    inside.discard(tid)
            elif event in REFUSED:
                notes.append(f"{event} was called")
            elif event in ("object.__setattr__", "object.__delattr__") and args and \
                    (args[0] is trace or args[0] is trace_homes):
                notes.append("the watch's trace function was changed")
        except KeyboardInterrupt:  # the grader's interrupt (a cell's time limit): raised again outside
            interrupted = True
        except BaseException as exc:  # noqa: BLE001 - a failure of the watch fails the verdict
            notes.append(f"the watch failed: {type(exc).__name__}")
        if interrupted:
            interrupt_main()  # the last call: the KeyboardInterrupt comes in the caller's frame

    # The refusals, in a hook of its own that holds nothing: its frame is in the traceback of
    # what it refuses, and all a reader finds there is constants (a RuntimeError aborts the call).
    # Every name it uses is a parameter with a default (the function object is out of reach; its
    # globals, an empty dict a reader of its frame could fill, are never read). It lets the
    # watch's own arm and verdict set the trace, knowing them by their code's id only.
    gate_namespace = {"__builtins__": {}}
    exec("def gate(event, args, traces=(), own=(), getframe=None, id=None, Refused=None, refused=()):\n"
         "    if event in refused:\n"
         "        if event == 'sys.settrace' and id(getframe(1).f_code) in own:\n"
         "            return\n"
         "        raise Refused(event + ' is refused while the grader watches the notebook '\n"
         "                      '(it could switch the watch off)')\n"
         "    if (event == 'object.__setattr__' or event == 'object.__delattr__') and args and (args[0] is traces[0] or args[0] is traces[1]):\n"
         "        raise Refused(\"the grader's trace function cannot be changed\")\n",
         gate_namespace)
    gate = gate_namespace.pop("gate")
    gate.__defaults__ = ((trace, trace_homes), frozenset((id(arm.__code__), id(verdict.__code__))), getframe, id,
                         RuntimeError, REFUSED)
    addaudithook(watch_hook)
    addaudithook(gate)
    notes.clear()  # the gate's own sys.addaudithook


_minikafka_seal(%(specs)r, %(theirs)d)
del _minikafka_seal
'''

_ARM = ("__import__('sys').audit(%(event)r, 'arm', %(specs)r, %(names)r, [globals().get(_mk_n) for _mk_n in %(names)r], "
        "%(strict)r)\n")

# The verdict of the watch armed before the checks: printed with its signature after a nonce.
_VERDICT = ("_mk_out = []\n__import__('sys').audit(%(event)r, 'verdict', _mk_out, %(nonce)r, '')\n"
            "print(%(nonce)r + repr((tuple(_mk_out), '')))\n")


def new_key() -> bytes:
    """A random key of a verdict's signature's size (tests sign with it; a grading's key comes from
    its ``Handshake``)."""
    return secrets.token_bytes(32)


class Handshake:
    """The grader's half of the watch's key exchange, one per grading: ``public`` goes into the
    seal cell (``seal_cell``); ``key(text)`` is the signatures' key, from the kernel's public number
    in that cell's output (None if it printed none: the seal did not run)."""

    def __init__(self) -> None:
        self._secret = secrets.randbits(256) | 1 << 255
        self.public = pow(G, self._secret, P)

    def key(self, text: str) -> bytes | None:
        for line in text.splitlines():
            if line.startswith(SEAL_MARK):
                try:
                    theirs = int(line[len(SEAL_MARK):], 16)
                except ValueError:
                    return None
                if not 1 < theirs < P - 1:
                    return None
                return hashlib.sha256(pow(theirs, self._secret, P).to_bytes(256, "big")).digest()
        return None


def seal_cell(specs: list[str], public: int) -> str:
    """The program's first cell: the audit hook, with the package's code of ``specs`` read now;
    ``public`` is the grader's half of the key exchange (``Handshake.public``)."""
    return _SEAL % {"event": EVENT, "specs": list(dict.fromkeys(specs)), "theirs": public, "mark": SEAL_MARK,
                    "g": G, "p": P}


def arm_source(specs: list[str], names: list[str], strict: bool = False) -> str:
    """Arm the watch over ``names`` (functions and classes in the notebook's globals, looked up by
    this cell: the hook runs nothing of the student's, not even a dict lookup of theirs)."""
    return _ARM % {"event": EVENT, "specs": list(specs), "names": list(names), "strict": strict}


def verdict_cell(nonce: str) -> str:
    """The verdict of the watch ``arm_source`` armed, printed after ``nonce`` with its signature."""
    return _VERDICT % {"event": EVENT, "nonce": nonce}


def armed_text(specs: list[str], names: list[str], strict: bool = False) -> str:
    """What a verdict of the watch armed by ``arm_source(specs, names, strict)`` signs besides
    its answer: a verdict on a watch armed over anything else does not verify."""
    return repr((list(specs), list(names), bool(strict)))


def signature(key: bytes, nonce: str, said: str, answer: str, armed: str) -> str:
    """What the hook signs a verdict with, computed here (HMAC-SHA256, as the hook does by hand);
    ``armed``: ``armed_text`` of the watch it was armed over."""
    return hmac.new(key, (nonce + "\n" + said + "\n" + answer + "\n" + armed).encode(), hashlib.sha256).hexdigest()


UNSIGNED = "the grader's watch gave no signed verdict for this call"


def read(text: str, nonce: str, key: bytes, armed: str) -> tuple[str, str] | None:
    """(the watch's verdict, the answer's text) from a cell's stdout: the last line after
    ``nonce``, ``repr((verdict, signature), answer)``; the verdict is ``UNSIGNED`` unless the
    hook signed it for this nonce, this answer and a watch armed as ``armed`` (``armed_text``).
    None if no such line was printed."""
    from .ast_guard import literal_eval

    for line in reversed(text.splitlines()):
        if line.startswith(nonce):
            try:
                said = literal_eval(line[len(nonce):])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            if not (isinstance(said, tuple) and len(said) == 2 and isinstance(said[0], tuple)
                    and isinstance(said[1], str)):
                return None
            out, answer = said
            good = (len(out) == 2 and all(isinstance(x, str) for x in out)
                    and hmac.compare_digest(out[1], signature(key, nonce, out[0], answer, armed)))
            return (out[0] if good else UNSIGNED), answer
    return None
