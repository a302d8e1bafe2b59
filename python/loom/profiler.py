"""Fluid's fluid.profiler on Loom's timelines (executor/timeline.h).

While the profiler runs, every op an Executor (one place) or a CompiledProgram (every place)
runs is recorded with its span; stop_profiler prints Fluid's per-op summary table (calls,
total, min, max, average and ratio of each op type, in ms) and writes the recorded events to
profile_path as a chrome://tracing JSON (Fluid writes a protobuf there for its timeline tool;
Loom's file opens directly in chrome://tracing or Perfetto).

    with fluid.profiler.profiler("CPU", "total", "/tmp/profile"):
        for _ in range(10):
            exe.run(main, feed=..., fetch_list=[loss])
"""
import contextlib
import sys

from . import core

__all__ = ["profiler", "start_profiler", "stop_profiler", "reset_profiler", "cuda_profiler"]

_STATES = ("CPU", "GPU", "All")
_SORT_KEYS = (None, "calls", "total", "max", "min", "ave")
_TRACER_OPTIONS = ("Default", "OpDetail", "AllOpDetail")

_active = {"timeline": None, "state": None}


def _timeline():
    """The timeline runs record into while the profiler is on, else None."""
    return _active["timeline"]


def _check_state(state):
    if state not in _STATES:
        raise ValueError("profiler: state %r is not one of %s" % (state, ", ".join(_STATES)))


def _check_sorted_key(sorted_key):
    if sorted_key not in _SORT_KEYS:
        raise ValueError("profiler: sorted_key %r is not one of None, %s"
                         % (sorted_key, ", ".join(k for k in _SORT_KEYS if k)))


def start_profiler(state, tracer_option="Default"):
    """Starts recording every op later runs execute. state is 'CPU', 'GPU' or 'All' (Loom
    records the ops of every place whichever is given: a CUDA op's span is its host-side
    launch and wait); tracer_option is accepted as Fluid spells it. Starting twice is an
    error."""
    _check_state(state)
    if tracer_option not in _TRACER_OPTIONS:
        raise ValueError("start_profiler: tracer_option %r is not one of %s"
                         % (tracer_option, ", ".join(_TRACER_OPTIONS)))
    if _active["timeline"] is not None:
        raise RuntimeError("start_profiler: the profiler is already running (stop_profiler "
                           "first)")
    _active["timeline"] = core.Timeline()
    _active["state"] = state


def reset_profiler():
    """Drops what the running profiler has recorded so far (Fluid's reset_profiler)."""
    if _active["timeline"] is not None:
        _active["timeline"] = core.Timeline()


def summarize(events, sorted_key=None):
    """Rows (op type, calls, total, min, max, ave, ratio) of events (core.Timeline.events()),
    times in ms; sorted as stop_profiler sorts them (None: in order of first appearance)."""
    rows, order = {}, []
    for _rank, _lane, name, _detail, _begin, dur in events:
        if name not in rows:
            rows[name] = [0, 0.0, float("inf"), 0.0]
            order.append(name)
        r = rows[name]
        ms = dur / 1000.0
        r[0] += 1
        r[1] += ms
        r[2] = min(r[2], ms)
        r[3] = max(r[3], ms)
    grand = sum(r[1] for r in rows.values()) or 1.0
    out = [(n, rows[n][0], rows[n][1], rows[n][2], rows[n][3], rows[n][1] / rows[n][0],
            rows[n][1] / grand) for n in order]
    index = {"calls": 1, "total": 2, "min": 3, "max": 4, "ave": 5}
    if sorted_key is not None:
        out.sort(key=lambda row: row[index[sorted_key]], reverse=sorted_key != "min")
    return out


def _print_report(state, sorted_key, rows, out):
    order = {None: "in the order of first appearance", "calls": "by number of calls",
             "total": "by total time", "max": "by max time", "min": "by min time",
             "ave": "by average time"}[sorted_key]
    direction = "" if sorted_key is None else (
        " in ascending order" if sorted_key == "min" else " in descending order")
    out.write("\n------------------------->     Profiling Report     "
              "<-------------------------\n\n")
    out.write("Place: %s\nTime unit: ms\nSorted %s%s\n\n" % (state, order, direction))
    width = max([len("Event")] + [len(r[0]) for r in rows]) + 2
    out.write("%-*s%-12s%-12s%-12s%-12s%-12s%-12s\n"
              % (width, "Event", "Calls", "Total", "Min.", "Max.", "Ave.", "Ratio."))
    for name, calls, total, lo, hi, ave, ratio in rows:
        out.write("%-*s%-12d%-12.6g%-12.6g%-12.6g%-12.6g%-12.6g\n"
                  % (width, name, calls, total, lo, hi, ave, ratio))
    out.write("\n")


def stop_profiler(sorted_key=None, profile_path="/tmp/profile"):
    """Stops recording, prints the per-op summary table (sorted_key: None, 'calls', 'total',
    'max', 'min' or 'ave') and writes the events to profile_path as chrome://tracing JSON
    (atomically). Returns the table's rows (see summarize). Stopping a profiler that is not
    running is an error."""
    _check_sorted_key(sorted_key)
    timeline, state = _active["timeline"], _active["state"]
    if timeline is None:
        raise RuntimeError("stop_profiler: the profiler is not running (start_profiler first)")
    _active["timeline"] = _active["state"] = None
    rows = summarize(timeline.events(), sorted_key)
    _print_report(state, sorted_key, rows, sys.stdout)
    if profile_path:
        timeline.write(profile_path)
    return rows


@contextlib.contextmanager
def profiler(state, sorted_key=None, profile_path="/tmp/profile", tracer_option="Default"):
    """start_profiler on entry, stop_profiler(sorted_key, profile_path) on exit (also when the
    block raises). Arguments are checked before anything is recorded."""
    _check_state(state)
    _check_sorted_key(sorted_key)
    start_profiler(state, tracer_option)
    try:
        yield
    finally:
        stop_profiler(sorted_key, profile_path)


@contextlib.contextmanager
def cuda_profiler(output_file, output_mode=None, config=None):
    """Fluid's nvprof wrapper: not available in Loom (use profiler('GPU') or Nsight Systems
    around the whole process)."""
    raise NotImplementedError("cuda_profiler: Loom does not drive nvprof; use "
                              "fluid.profiler.profiler('GPU', ...) or run the process under "
                              "nsys")
    yield  # pragma: no cover
