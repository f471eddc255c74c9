"""`python -m dadt.timeline summary`: totals and shares from a synthetic Chrome trace, a trace cut
short, and --plot. Plain pytest, no launcher and no runtime needed."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHONPATH = os.path.join(REPO, "frameworks", "python")

A = "grad.a"
B = 'grad "b"\\x'  # a quote and a backslash, escaped in the file as the writer does


def _row(pid, name):
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": name}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": pid,
         "args": {"sort_index": pid}},
    ]


def _span(pid, name, begin, end, args=None):
    e = {"ph": "E", "name": name, "ts": end, "pid": pid, "tid": pid}
    if args:
        e["args"] = args
    return [{"ph": "B", "name": name, "ts": begin, "pid": pid, "tid": pid}, e]


def synthetic_trace():
    """Two tensors; times in microseconds from 1,000,000.

    grad.a: QUEUE 1000, NEGOTIATE_ALLREDUCE 2000, ALLREDUCE [3000, 10000) holding
            MEMCPY_IN 1000 + GLOO_ALLREDUCE 5000 + MEMCPY_OUT 500, so ALLREDUCE's own time is 500;
            10000 in all.
    grad "b": QUEUE 2000, GLOO_ALLREDUCE 6000: 8000 in all.   Everything: 18000.
    """
    t = 1000000
    ev = [{"ph": "i", "name": "CYCLE_START", "ts": t, "pid": 0, "tid": 0, "s": "g"}]
    ev += _row(1, A)
    ev += _span(1, "QUEUE", t, t + 1000)
    ev.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": t + 1000, "pid": 1, "tid": 1})
    ev.append({"ph": "i", "name": "1", "ts": t + 2500, "pid": 1, "tid": 1, "s": "t",
               "args": {"ready_rank": 1}})
    ev.append({"ph": "E", "name": "NEGOTIATE_ALLREDUCE", "ts": t + 3000, "pid": 1, "tid": 1})
    ev.append({"ph": "B", "name": "ALLREDUCE", "ts": t + 3000, "pid": 1, "tid": 1})
    ev += _span(1, "MEMCPY_IN_FUSION_BUFFER", t + 3000, t + 4000)
    ev += _span(1, "GLOO_ALLREDUCE", t + 4000, t + 9000)
    ev += _span(1, "MEMCPY_OUT_FUSION_BUFFER", t + 9000, t + 9500)
    ev.append({"ph": "E", "name": "ALLREDUCE", "ts": t + 10000, "pid": 1, "tid": 1,
               "args": {"dtype": "float32", "shape": [2, 3]}})
    ev += _row(2, B)
    ev += _span(2, "QUEUE", t, t + 2000)
    ev += _span(2, "GLOO_ALLREDUCE", t + 2000, t + 8000, {"dtype": "float32", "shape": [4]})
    ev.append({"ph": "i", "name": "CYCLE_START", "ts": t + 5000, "pid": 0, "tid": 0, "s": "g"})
    return ev


def write_like_the_writer(path, events, padding=0):
    """One entry per line, as dadt's writer lays it out (padding: a live file's reserved spaces)."""
    body = ",\n".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in events)
    text = "[\n" + body + " " * padding + "\n]\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


def run_summary(*args):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "dadt.timeline", "summary", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def parse_table(stdout):
    """The per-tensor table as dicts: the tensor is what lies left of the PHASE column (blank when
    it repeats), the phase the next word, the five numbers the last words of the line."""
    lines = stdout.splitlines()
    h = next(k for k, line in enumerate(lines) if line.startswith("TENSOR"))
    phase_at = lines[h].index("PHASE")
    rows, tensor = [], None
    for line in lines[h + 2:]:
        if not line.strip():
            break
        tensor = line[:phase_at].strip() or tensor
        count, total, incl, tensor_share, all_share = line.split()[-5:]
        rows.append({"TENSOR": tensor, "PHASE": line[phase_at:].split()[0], "COUNT": count,
                     "TOTAL_MS": total, "INCL_MS": incl, "%TENSOR": tensor_share,
                     "%ALL": all_share})
    return rows


def by_key(rows):
    return {(r["TENSOR"], r["PHASE"]): r for r in rows}


def test_totals_and_shares(tmp_path):
    path = tmp_path / "timeline.json"
    write_like_the_writer(path, synthetic_trace())
    res = run_summary(str(path))
    assert res.returncode == 0, res.stderr
    rows = by_key(parse_table(res.stdout))
    expect = {  # (tensor, phase): (total ms, % of the tensor, % of all)
        (A, "GLOO_ALLREDUCE"): (5.0, 50.0, 27.8),
        (A, "NEGOTIATE_ALLREDUCE"): (2.0, 20.0, 11.1),
        (A, "QUEUE"): (1.0, 10.0, 5.6),
        (A, "MEMCPY_IN_FUSION_BUFFER"): (1.0, 10.0, 5.6),
        (A, "MEMCPY_OUT_FUSION_BUFFER"): (0.5, 5.0, 2.8),
        (A, "ALLREDUCE"): (0.5, 5.0, 2.8),
        (B, "GLOO_ALLREDUCE"): (6.0, 75.0, 33.3),
        (B, "QUEUE"): (2.0, 25.0, 11.1),
    }
    assert set(rows) == set(expect), res.stdout
    for key, (total, tensor_share, all_share) in expect.items():
        r = rows[key]
        assert float(r["TOTAL_MS"]) == pytest.approx(total), key
        assert float(r["%TENSOR"]) == pytest.approx(tensor_share, abs=0.05), key
        assert float(r["%ALL"]) == pytest.approx(all_share, abs=0.05), key
    assert float(rows[(A, "ALLREDUCE")]["INCL_MS"]) == pytest.approx(7.0)  # nested phases included
    # Sorted by total: the busier tensor first, then its phases largest first.
    order = [(r["TENSOR"], r["PHASE"]) for r in parse_table(res.stdout)]
    assert order[0] == (A, "GLOO_ALLREDUCE")
    assert order.index((B, "GLOO_ALLREDUCE")) > order.index((A, "ALLREDUCE"))
    totals = [float(r["TOTAL_MS"]) for r in parse_table(res.stdout) if r["TENSOR"] == A]
    assert totals == sorted(totals, reverse=True)
    assert "all tensors, per phase (total 18.000 ms)" in res.stdout
    assert "GLOO_ALLREDUCE" in res.stdout.split("all tensors, per phase")[1].splitlines()[3]


def test_the_library_api(tmp_path):
    sys.path.insert(0, PYTHONPATH)
    try:
        from dadt.timeline import load_trace, summarize
    finally:
        sys.path.remove(PYTHONPATH)
    path = tmp_path / "timeline.json"
    write_like_the_writer(path, synthetic_trace(), padding=5000)  # a live, padded file
    s = summarize(load_trace(str(path)))
    assert s.total_us == pytest.approx(18000)
    assert s.tensor_totals == {A: pytest.approx(10000), B: pytest.approx(8000)}
    assert s.trace.tensors == [A, B]
    assert [ts for t, n, ts in s.trace.instants if n == "CYCLE_START"] == [1000000, 1005000]
    assert not s.trace.truncated and s.trace.open_spans == 0


@pytest.mark.parametrize("cut", [0.5, 0.8, 0.97])
def test_a_file_cut_short_still_summarizes(tmp_path, cut):
    path = tmp_path / "cut.json"
    text = write_like_the_writer(path, synthetic_trace())
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[: int(len(text) * cut)])  # mid-entry, no closing bracket
    res = run_summary(str(path))
    assert res.returncode == 0, res.stderr
    assert "cut short" in res.stdout
    rows = by_key(parse_table(res.stdout))
    assert (A, "QUEUE") in rows
    assert float(rows[(A, "QUEUE")]["TOTAL_MS"]) == pytest.approx(1.0)


def test_missing_closing_bracket_only(tmp_path):
    path = tmp_path / "open.json"
    text = write_like_the_writer(path, synthetic_trace())
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip().rstrip("]"))
    res = run_summary(str(path))
    assert res.returncode == 0, res.stderr
    assert len(parse_table(res.stdout)) == 8


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib",
                        reason="--plot needs matplotlib (python3 -m pip install matplotlib)")
    path = tmp_path / "timeline.json"
    out = tmp_path / "step.png"
    write_like_the_writer(path, synthetic_trace())
    res = run_summary(str(path), "--plot", str(out))
    assert res.returncode == 0, res.stderr
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 5000
    assert "plot: " in res.stdout


def test_errors(tmp_path):
    res = run_summary(str(tmp_path / "missing.json"))
    assert res.returncode == 2
    assert "cannot read" in res.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("[\n]\n")
    res = run_summary(str(empty))
    assert res.returncode == 0
    assert "no spans" in res.stdout
