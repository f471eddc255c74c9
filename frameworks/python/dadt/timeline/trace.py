"""Loading a Chrome trace file into spans, one row (tensor) at a time.

The writer keeps the file valid JSON at every moment, but a trace may still come from elsewhere or
be cut short by a copy, so loading is lenient: a document that does not parse as a whole is read
entry by entry up to the first broken one (the same as appending the missing ']'). B/E pairs are
matched per row the way chrome://tracing does (an E closes the innermost open B); spans still open
at the end are closed at the last timestamp of the trace and counted in ``Trace.open_spans``.
"""

import fcntl
import json
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass
class Span:
    """One phase of one tensor: [start_us, end_us), nested ``depth`` levels deep in its row."""

    tensor: str
    phase: str
    start_us: float
    end_us: float
    depth: int
    self_us: float = 0.0  # duration minus the nested spans' durations

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class Trace:
    spans: List[Span] = field(default_factory=list)
    instants: List[Tuple[str, str, float]] = field(default_factory=list)  # (tensor, name, ts)
    tensors: List[str] = field(default_factory=list)  # in order of first appearance
    open_spans: int = 0  # B without E (the trace was cut short)
    truncated: bool = False  # the JSON itself was cut short or damaged
    start_us: float = 0.0
    end_us: float = 0.0


def _read_snapshot(path: str, lock_timeout_s: float = 5.0) -> str:
    """The file's text; under flock(LOCK_SH) when it can be had, so that a live file is read
    between two commits of the writer (it holds LOCK_EX while writing)."""
    with open(path, "rb") as f:
        deadline = time.monotonic() + lock_timeout_s
        locked = False
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                locked = True
                break
            except OSError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
        try:
            data = f.read()
        finally:
            if locked:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return data.decode("utf-8", errors="replace")


def _lenient_entries(text: str) -> Tuple[list, bool]:
    """The entries of a JSON array (or of {"traceEvents": [...]}) and whether it was cut short."""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            doc = doc.get("traceEvents", [])
        return (doc if isinstance(doc, list) else []), False
    except ValueError:
        pass
    try:  # a writer that died before closing the document
        doc = json.loads(text.rstrip().rstrip(",") + "]")
        if isinstance(doc, list):
            return doc, True
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    start = text.find("[")
    entries: list = []
    if start < 0:
        return entries, True
    pos = start + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        entries.append(obj)
    return entries, True


def parse_trace(entries: list, truncated: bool = False) -> Trace:
    """Turns trace-event entries into spans per tensor row."""
    names: Dict[Tuple[int, int], str] = {}
    entries = [e for e in entries if isinstance(e, dict)]
    for e in entries:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            key = (e.get("pid", 0), e.get("tid", e.get("pid", 0)))
            if e["name"] == "process_name":
                names.setdefault((key[0], None), str(e.get("args", {}).get("name", "")))
            else:
                names[key] = str(e.get("args", {}).get("name", ""))

    def row_name(pid, tid) -> str:
        return names.get((pid, tid)) or names.get((pid, None)) or "pid %s" % pid

    trace = Trace(truncated=truncated)
    seen = set()
    stacks: Dict[Tuple[int, int], List[Span]] = {}
    ts_all = [float(e["ts"]) for e in entries if "ts" in e and e.get("ph") != "M"]
    if ts_all:
        trace.start_us, trace.end_us = min(ts_all), max(ts_all)

    def close(span: Span, end: float, stack: List[Span]) -> None:
        span.end_us = max(end, span.start_us)
        span.self_us += span.duration_us
        if stack:  # the parent does not count the time its children took
            stack[-1].self_us -= span.duration_us
        trace.spans.append(span)

    timed = [e for e in entries if e.get("ph") in ("B", "E", "X", "i", "I")]
    for e in sorted(timed, key=lambda e: float(e.get("ts", 0))):  # stable: file order breaks ties
        ph, ts = e["ph"], float(e.get("ts", 0))
        key = (e.get("pid", 0), e.get("tid", e.get("pid", 0)))
        tensor = row_name(*key)
        if ph in ("B", "X") and tensor not in seen:
            seen.add(tensor)
            trace.tensors.append(tensor)
        stack = stacks.setdefault(key, [])
        if ph == "B":
            stack.append(Span(tensor, str(e.get("name", "")), ts, ts, len(stack)))
        elif ph == "E" and stack:
            span = stack.pop()
            close(span, ts, stack)
        elif ph == "X":
            span = Span(tensor, str(e.get("name", "")), ts, ts, len(stack))
            close(span, ts + float(e.get("dur", 0)), stack)
        elif ph in ("i", "I"):
            scope_tensor = "" if e.get("s", "t") == "g" else tensor
            trace.instants.append((scope_tensor, str(e.get("name", "")), ts))
    for stack in stacks.values():
        while stack:
            trace.open_spans += 1
            span = stack.pop()
            close(span, trace.end_us, stack)
    trace.spans.sort(key=lambda s: (s.start_us, s.depth))
    return trace


def load_trace(path: str) -> Trace:
    """Reads a timeline file (leniently, see the module doc)."""
    entries, truncated = _lenient_entries(_read_snapshot(path))
    return parse_trace(entries, truncated)
