"""The one reader of the Chrome traces Poseidon writes, for the analysis scripts.

    import poseidon_trace
    for e in poseidon_trace.read("out/validate/config-0/sim.json"):
        if e.kind == "iteration" and e.thread.role == "worker":
            use(e.thread.index, e.iteration, e.ts)

It reads what core/trace.cc writes (`poseidon simulate --trace`, `launch --trace-dir`, `trace
merge`, and `validate`'s sim.json and live.json) and returns typed events, as
validation/trace_reader.h does for the C++ side. Who an event belongs to comes from the trace
itself: the writer names every (actor, device, lane) it uses in a "thread_name" metadata event
("worker 0 compute", "shard 1 update", "worker 2 device 3 copy", "coordinator send"), and an
event's thread is looked up there by its tid. So nothing here copies the writer's numbering of
thread ids (a lane is tid mod 8 only on device 0; a machine's other devices have ids above
10^9), and nothing matches names with regular expressions: a name is split into the words
core/trace.cc's EventName joins ("iteration 3", "push fc2 c1 -> shard 0").

A file that is not such a trace is one TraceError naming the file and, where it is one event,
the event's index and name.
"""
import json
from dataclasses import dataclass
from typing import Optional

LANES = ("compute", "copy", "update", "send", "protocol", "reduce", "broadcast")
ROLES = ("worker", "shard", "coordinator")


class TraceError(ValueError):
    """A trace this reader cannot read; str() is the one line to print."""


@dataclass(frozen=True)
class Thread:
    """One lane of one actor: "worker 0 compute" is Thread("worker", 0, 0, "compute")."""
    role: str  # "worker", "shard" or "coordinator"
    index: int  # the worker's or shard's index; 0 for the coordinator
    device: int  # 0: the actor's own lanes; d > 0: device d of its machine
    lane: str  # one of LANES

    @property
    def actor(self):
        """("worker", 0): who, whatever the device and lane."""
        return (self.role, self.index)


@dataclass(frozen=True)
class Event:
    """A span ("X") or an instant ("i"); times in microseconds, as the trace holds them."""
    phase: str
    kind: str  # "iteration", "iteration end", "synced", "applied", "job done", "task",
    #            "message" or "other" (an instant of a name this reader does not know)
    name: str
    category: str
    thread: Thread
    ts: float
    dur: float
    clock: int
    bytes: int
    what: str  # the name's first word: "forward", "backward", "push", "params", "factors", ...
    iteration: Optional[int] = None  # "iteration" and "iteration end": N of the name
    peer: Optional[tuple] = None  # "message": the receiver, ("shard", 0), ("coordinator", 0)


def parse_actor(words, where):
    """(role, index, rest) of an actor's name at the start of `words` (JobLayout::ActorName)."""
    if words and words[0] == "coordinator":
        return "coordinator", 0, words[1:]
    if len(words) >= 2 and words[0] in ROLES and words[1].isdigit():
        return words[0], int(words[1]), words[2:]
    raise TraceError(f"{where}: '{' '.join(words)}' does not start with an actor's name "
                     "('worker N', 'shard N' or 'coordinator')")


def parse_thread(label, where):
    """A thread_name label: "worker 0 compute", "shard 1 device 2 update", "coordinator send"."""
    role, index, rest = parse_actor(label.split(" "), where)
    device = 0
    if len(rest) == 3 and rest[0] == "device" and rest[1].isdigit():
        device, rest = int(rest[1]), rest[2:]
    if len(rest) != 1 or rest[0] not in LANES:
        raise TraceError(f"{where}: thread name '{label}' does not end with a lane "
                         f"({', '.join(LANES)})")
    return Thread(role, index, device, rest[0])


def classify(phase, category, name, where):
    """(kind, iteration, peer) of an event from its phase, category and name's words."""
    words = name.split(" ")
    if category == "network":
        if " -> " not in name:
            raise TraceError(f"{where}: a message's name '{name}' has no ' -> RECEIVER'")
        role, index, rest = parse_actor(name.rsplit(" -> ", 1)[1].split(" "), where)
        if rest:
            raise TraceError(f"{where}: a message's receiver in '{name}' is not one actor")
        return "message", None, (role, index)
    if category == "compute":
        return "task", None, None
    if words[0] == "iteration" and len(words) == 2 and words[1].isdigit():
        return "iteration", int(words[1]), None
    if words[:2] == ["iteration", "end"] and len(words) == 3 and words[2].isdigit():
        return "iteration end", int(words[2]), None
    if words[0] in ("synced", "applied"):
        return words[0], None, None
    if name == "job done":
        return "job done", None, None
    return "other", None, None


def events_of(doc, source):
    """The typed events of one parsed trace (a dict with "traceEvents")."""
    raw = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        raise TraceError(f"{source}: no 'traceEvents' array: not a Chrome trace Poseidon wrote "
                         "(poseidon simulate --trace, launch --trace-dir, trace merge)")
    threads = {}
    for i, e in enumerate(raw):
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name":
            where = f"{source}: event {i} (thread_name)"
            label = e.get("args", {}).get("name") if isinstance(e.get("args"), dict) else None
            if not isinstance(label, str) or not isinstance(e.get("tid"), int):
                raise TraceError(f"{where}: needs an integer 'tid' and args.name")
            threads[e["tid"]] = parse_thread(label, where)
    out = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict):
            raise TraceError(f"{source}: event {i} is not an object")
        phase = e.get("ph")
        if phase in ("M", "C"):  # metadata; a process's CPU counter (core::ProcessCpuEvent)
            continue
        name = e.get("name")
        where = f"{source}: event {i} ({name})"
        if phase not in ("X", "i") or not isinstance(name, str) or not name:
            raise TraceError(f"{where}: 'ph' must be X, i or M and 'name' a non-empty string")
        try:
            tid, ts = e["tid"], float(e["ts"])
            dur = float(e["dur"]) if phase == "X" else 0.0
            args = e.get("args", {})
            clock, nbytes = int(args.get("clock", 0)), int(args.get("bytes", 0))
            category = e.get("cat", "")
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise TraceError(f"{where}: needs 'tid', 'ts'{', dur' if phase == 'X' else ''} "
                             f"and integer args.clock / args.bytes ({err!r})") from None
        if tid not in threads:
            raise TraceError(f"{where}: thread id {tid} has no thread_name metadata event: the "
                             "writer names every thread it uses (a trace cut short, or "
                             "merged by hand?)")
        kind, iteration, peer = classify(phase, category, name, where)
        out.append(Event(phase, kind, name, category, threads[tid], ts, dur, clock, nbytes,
                         name.split(" ")[0], iteration, peer))
    return out


def read(path):
    """Every event of one trace file, in the file's order."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as err:
        raise TraceError(f"{path}: cannot read: {err.strerror}") from None
    except ValueError as err:
        raise TraceError(f"{path}: not JSON: {err}") from None
    return events_of(doc, path)


def read_all(paths):
    """The events of several files (a live job's one trace per rank), file after file."""
    out = []
    for path in paths:
        out += read(path)
    return out
