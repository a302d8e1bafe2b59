#!/usr/bin/python3
"""Checks the simulator against this machine (docs/SIMULATOR.md, "Against this machine").

1. Calibration, from primitives measured with `loom bench collective` (never the allreduces
   predicted below), each parameter fitted so that the simulator replays its primitive in the
   measured time (bisection on the simulator itself):
   - per rank count, the call's fixed cost and the per-message latency: in-process a 64-byte
     native broadcast (the ranks' meeting, which every in-process call starts with, and no
     message), one down the tree, and an allgather around the ring (exchanges: the exchange
     latency); over MPI a 1-rank call (no message) and a one-message broadcast on 2 ranks, and
     on 4 ranks a 64-byte allgather around the ring (3 exchanges) against a broadcast down the
     tree (2 messages); over MPI where processes outnumber the cores, a protocol step below
     the eager size from a ring allgather of 64 B up to eager-size messages (step=BYTES/US);
     over MPI, from a 2-rank broadcast of 64 B-64 KiB in place (which also finds the
     rendezvous step),
     what a message of each size below 64 KiB pays beyond the model's latency and rates
     (msg=BYTES/US,...; the sweep's growth scaled down to the model's, fit_messages);
   - per rank count and working-set level (calls of 64 KiB-64 MiB per rank on 2 and on 4
     ranks: buffers of 2 x ranks x that), the rates of one rank copying (a broadcast:
     in place, the transfers alone, since the root's copy would run beside them; records
     before 2026-12-04 20:18 over MPI, 23:20 in-process, out of place) and reducing (a reduce:
     on 2 ranks the tree's, on 4 a star's, whose root reduces alone), and of all ranks copying
     and reducing at once (the ring's allgather and reduce-scatter, each sized to the level's
     working set; on 4 ranks the shared reduce rate at least what the tree's reduce, two ranks
     at once, shows), which the cores and the memory system share (at least one rank's
     rates, except in-process on 2 ranks at the levels where the native pass has rates of its
     own: there both ranks at once can get less than one alone).
   - over MPI, per working-set level, a rank's local copy (memcpy; a transfer crosses the
     kernel instead) from 1-rank calls, and what the kernel takes per fresh page a process
     touches (a fresh malloc block written once and freed, against rewriting mapped memory):
     Open MPI's temporaries from 32 MiB on are fresh every call;
   - in-process, beside each level's primitives (and at 4 and 16 KiB before them), what one
     core's copy costs where another core wrote its source, destination or both last (`loom
     bench copies`; the spec's dirty=, with which the levels' rates are then fitted: the engine
     keeps which core wrote each range of the ranks' buffers last; --copies gives the table
     for a record that has none, or `off` replays without it);
   - in-process, what the native pass's streaming stores cost, from a native broadcast and a
     native reduce of 64 MiB fitted to their sum (an allreduce reads and writes in its
     proportion);
   - in-process, the native pass's own rates where it writes through the caches (it reads
     inputs at rest, where a transfer reads what another core has just written), per level
     below the streaming outputs from a native broadcast (copy) and a native reduce (reduce),
     and its wait for every rank's blocks from a native broadcast of twice the size that runs
     from copies in the meeting (the smallest pass of blocks) against a 64-byte one in the
     same launches.
   The core count is the machine's. Each row reports the fastest of 9 rounds in the fastest of
   2 launches (--stat min, --launches: the machine undisturbed by other load, as the simulator
   models it); a launch in which the OS kept two ranks on one CPU while another was free in most
   rounds of a row (loom bench's Placement line) is launched again.
2. Prediction: allreduce with ring, tree, star, multi_tree and native (the transport's own:
   in-process one pass over shared memory, over MPI Open MPI's MPI_Iallreduce) on 2 and 4
   ranks, 4 KiB-64 MiB, measured (median of --runs runs) and simulated on the calibration of
   its rank count,
   `host:N:cores=C:latency=L:levels=WS/COPY/REDUCE/MEM/MEM_REDUCE,...` side by side, with the
   error, the share within +-25 %, and the fastest algorithm per size measured vs predicted (a
   crossover predicted within one size step counts as met), also among the schedules alone.

   With --paired every run calibrates and then measures at once, predicts from its own
   calibration, and a row's error is the median of the runs' own errors: a slow period of
   the machine (minutes long on a shared VM) then moves both sides of a run alike. Paired runs
   also print a pooled column (each parameter the median of the runs') and a fastest one
   (each primitive and each row the fastest of its runs: the machine at its fastest on both
   sides, which a run whose calibration and rows fell in different speeds does not move).
   Unpaired, --across says how each measurement's runs are pooled (median or min).

    PYTHONPATH=build/python bench/sim/calibrate_host.py --transport inprocess [--plot out.png]
    PYTHONPATH=build/python bench/sim/calibrate_host.py --transport mpi --paired

3. Record and replay: --record FILE writes every measurement of the run to FILE (JSON); --replay
   FILE runs the same calibration and predictions on those measurements instead of the machine
   (the same options: it names any measurement that differs), in seconds, so that a change of
   the model is judged against the very timings the last run took. bench/sim/records/ keeps the
   recorded runs docs/SIMULATOR.md reports (it gives the command that replays them). A paired
   record replayed without --paired gives each measurement its runs' values (--across pools
   them). A record names the schedules it measured ("schedule"): one without it measured the
   rooted broadcasts whose root copied send into recv before sending, and replays with them.

No timing here is asserted in a test: timings on a shared 2-core VM are a benchmark
(tests/python/test_calibrate_replay.py checks the replay and its views on a recorded run).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

import loom.sim as sim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Loom's schedules, and the transport's native collective (in-process its pass over shared
# memory, what auto runs there at every size; over MPI Open MPI's, auto's from 128 KiB to 1 MiB).
SCHEDULES = ["ring", "tree", "star", "multi_tree"]
ALGOS = list(SCHEDULES)
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+(\S+)\s+([0-9.]+)")
PLACEMENT = re.compile(r"^# Placement\s*:.*in most rounds of (\d+) of (\d+) rows", re.M)
# Launches passed over because the OS crowded the ranks (bench()), and commands whose every
# launch was.
CROWDED = {"launches": 0, "kept": 0}


# Rounds per row, what a row reports of them (--stat), and a factor on every row's calls per
# round (more rounds of fewer calls: the fastest round is then one the machine's other load
# left alone).
# With --stat min every measurement is also the fastest of `launches` launches of its command:
# on a shared VM a whole launch can run in a slow mode (over MPI every call of 16 KiB-4 MiB of
# one mpirun 2.5-3x slower than in the next, in all of its rounds).
ROUNDS = {"rounds": 9, "stat": "min", "iters": 0.5, "launches": 2, "small_launches": 5}
# The in-process native pass writes outputs of this many bytes and more (all ranks') with
# streaming stores (collective/transport/inprocess.h, kInProcessNativeStreamingBytes).
STREAMING_BYTES = 16 << 20
# What a measurement taken in several runs reports of them (--across; not part of its key).
ACROSS = {"pick": "median"}
# Commands whose calls are all at most this large take the fastest of `small_launches` launches
# (with --stat min): they take a second, and a launch's slow mode moves a call of microseconds
# the most.
SMALL_BYTES = 256 << 10


# --record FILE keeps every measurement (in the order taken) and --replay FILE takes them from
# such a file instead of the machine: a change of the model is then checked against the same
# measurements in seconds. A replay must ask for the same measurements in the same order (or
# for fewer: a few the file holds beyond them are passed over). A file of paired runs replayed
# unpaired gives each measurement its runs' values in their order (by key, "regroup"): the runs
# pooled per measurement (--across) instead of paired.
TAPE = {"mode": None, "entries": [], "at": 0, "regroup": None}
# The schedules a record measured: 2 from when the rooted broadcasts (tree, star, the ring's
# chain, multi_tree) send from the root's send buffer; a record without "schedule" measured
# the older order, whose root first copied send into recv, and replays with it.
SCHEDULE = {"version": 2, "root_copy_first": False}
# The broadcast that calibrates the 2-rank message sweep and each level's copy rate: in place
# ("broadcast:inplace", loom bench --in-place): with the root sending from its send buffer its
# memcpy into its own buffer runs beside the transfer (or, in-process below the hand-off size,
# after it on the same thread), and out of place the broadcast times both; in place it is the
# transfer alone. A record that holds none replays with the broadcast out of place.
BROADCAST = {"op": "broadcast"}
# The largest rate (GB/s) a level's fit tries: a fit that ends there found no rate slow enough.
FIT_MAX_GBPS = 1000.0
SKIPPABLE = 4


def regrouped(entries):
    """A tape's (key, value) entries as key -> its values in the order taken (its runs)."""
    out = {}
    for key, value in entries:
        out.setdefault(json.dumps(key), []).append(value)
    return out


def taped(key, take):
    """take() measured, recorded or replayed under `key` (a JSON-able list)."""
    if TAPE["mode"] == "replay" and TAPE["regroup"] is not None:
        queue = TAPE["regroup"].get(json.dumps(key))
        if not queue:
            sys.exit("calibrate_host: the replayed file has no more measurements %r" % (key,))
        TAPE["at"] += 1
        return queue.pop(0)
    if TAPE["mode"] == "replay":
        if TAPE["at"] >= len(TAPE["entries"]):
            sys.exit("calibrate_host: the replayed file ends before measurement %r" % (key,))
        want, value = TAPE["entries"][TAPE["at"]]
        if want != key:
            # A version that takes fewer measurements replays a later one's file: up to
            # SKIPPABLE measurements it does not ask for are passed over (a whole run's are not:
            # that would pair measurements of different runs).
            later = next((i for i in range(TAPE["at"] + 1,
                                           min(TAPE["at"] + 1 + SKIPPABLE, len(TAPE["entries"])))
                          if TAPE["entries"][i][0] == key), None)
            if later is None:
                sys.exit("calibrate_host: measurement %d of the replayed file is %r, this run "
                         "asks for %r (recorded with other options or another version)"
                         % (TAPE["at"], want, key))
            TAPE["at"] = later
            want, value = TAPE["entries"][later]
        TAPE["at"] += 1
        return value
    value = take()
    TAPE["entries"].append((key, value))  # kept for --record and for the fastest-runs view
    return value


def bench_key(transport, ranks, op, algos, lo, hi, iters, warmup, factor=4):
    """A bench() measurement's key on the tape, and its launches."""
    # Calls of at most SMALL_BYTES cost little to repeat: the fastest of more launches.
    launches = ROUNDS["launches"]
    if hi <= SMALL_BYTES:
        launches = max(launches, ROUNDS["small_launches"])
    rounds = {k: v for k, v in ROUNDS.items() if k != "small_launches"}
    key = [transport, ranks, op, list(algos), lo, hi, iters, warmup, factor, rounds]
    if launches != ROUNDS["launches"]:
        key.append(launches)
    return key, launches


def can_take(key):
    """Whether the measurement under `key` can be taken: always from the machine, in a replay
    where the file holds it (a record of an earlier version may not)."""
    if TAPE["mode"] != "replay":
        return True
    key = json.dumps(key)
    return any(json.dumps(k) == key for k, _ in TAPE["entries"])


def on_tape_copies(size, rounds=5, processes=False):
    """Whether copies(size) can be taken."""
    return can_take(copies_key(size, rounds, processes))


def on_tape(*args, **kwargs):
    """Whether bench(loom, *args) can be taken."""
    return can_take(bench_key(*args, **kwargs)[0])


def bench(loom, transport, ranks, op, algos, lo, hi, iters, warmup, factor=4):
    key, launches = bench_key(transport, ranks, op, algos, lo, hi, iters, warmup, factor)
    rows = taped(key, lambda: [[al, s, t] for (al, s), t in sorted(
        _bench(loom, transport, ranks, op, algos, lo, hi, iters, warmup, factor,
               launches).items())])
    return {(al, s): t for al, s, t in rows}


def _bench(loom, transport, ranks, op, algos, lo, hi, iters, warmup, factor, launches):
    # Rows of one size run round-robin, ROUNDS times, each reported as its median or fastest
    # round: what is compared is timed side by side.
    iters = max(2, int(iters * ROUNDS["iters"]))
    in_place = op.endswith(":inplace")
    cmd = [loom, "bench", "collective", "--op", op.split(":")[0], "--algo", ",".join(algos),
           "-b", str(lo), "-e", str(hi), "-f", str(factor), "-n", str(iters), "-w", str(warmup),
           "--rounds", str(ROUNDS["rounds"]), "--stat", ROUNDS["stat"]]
    if in_place:
        cmd.append("--in-place")
    if transport == "mpi":
        # The host model replays MPI's messages and MPI_Iallreduce: the ranks stay off the
        # shared-memory meeting they would use on one node (LOOM_MPI_SHM=0, passed with -x).
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--allow-run-as-root",
               "-x", "LOOM_MPI_SHM=0"] + cmd
    else:
        cmd += ["--places", "cpu:%d" % ranks]
    # A launch in which the OS left two ranks on one CPU while another was free in most rounds
    # of some row (loom bench's "# Placement" line: two polling ranks taking turns on one core
    # while the other idles, every call several times slower) measures the OS's placement,
    # not the transport: it is launched again, at most `launches` more times, and its timings
    # are used only where every launch was crowded.
    want = launches if ROUNDS["stat"] == "min" else 1
    times, crowded_times = {}, {}
    good = tries = 0
    while good < want and tries < 2 * want:
        tries += 1
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            sys.exit("calibrate_host: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
        placed = PLACEMENT.search(out.stdout)
        crowded = placed is not None and int(placed.group(1)) > 0
        into = crowded_times if crowded else times
        if crowded:
            CROWDED["launches"] += 1
        else:
            good += 1
        for line in out.stdout.splitlines():
            m = ROW.match(line)
            if m:
                key, t = (m.group(3), int(m.group(1))), float(m.group(4))
                into[key] = min(t, into.get(key, t))
    if not times:
        CROWDED["kept"] += 1
        print("# calibrate_host: every launch of %s left two ranks on one CPU in most rounds "
              "of some row; its timings are used" % " ".join(cmd[cmd.index("bench"):]),
              file=sys.stderr)
        return crowded_times
    return times


# (algorithm, size) -> (fastest, slowest) of the runs' medians, for the rows predicted.
RANGE = {}


def median_bench(runs, *args, **kwargs):
    """A measurement taken `runs` times: each row's median across them, or with --across min
    its fastest (ACROSS)."""
    samples = [bench(*args, **kwargs) for _ in range(runs)]
    for k in samples[0]:
        RANGE[k] = (min(s[k] for s in samples), max(s[k] for s in samples))
    pick = min if ACROSS["pick"] == "min" else statistics.median
    return {k: pick(s[k] for s in samples) for k in samples[0]}


# What the transport runs that the host model must replay too: over MPI every call starts with
# the communicator's signature round (an all-to-all of empty, tagged messages) and pipelines in
# 256 KiB pieces; in-process calls pipeline in 1 MiB pieces (collective/transport_registry.cc).
# In-process the rank whose post makes the match copies, except that a send hands transfers of
# 256 KiB and more to their receiver (collective/transport/inprocess.cc, handoff_bytes); over
# MPI the receiver copies. In-process the native collectives are one pass over shared memory
# (native=pass), and every call starts with the ranks' meeting (its fixed cost); over MPI
# native is Open MPI's MPI_Iallreduce, whose schedules (coll/libnbc) the model replays.
TRANSPORT = {"mpi_exchange": False, "chunk": 1 << 20, "matcher_copies": True,
             "handoff": 256 << 10, "native": "pass"}


# Messages larger than EAGER["bytes"] pay EAGER["us"] more (found by calibrate(); none in-process).
EAGER = {"bytes": None, "us": 0.0}
# What a message of each size below the smallest level's pays beyond its latency, protocol and
# rates: [(bytes, us), ...] from the 2-rank broadcast sweep (calibrate(); MSG_TRANSPORTS), or None.
MSG = {"points": None}

# In-process: what the native pass's streaming stores cost against copies at the memory's rates
# (the spec's stream=F; None: the model's default), per rank count (found by calibrate()).
STREAM = {"f": None}

# In-process: the native pass's own rates where it writes through the caches (the spec's
# pass=WS/COPY/REDUCE,...; None: the levels' rates), per rank count (found by calibrate()).
PASS = {"levels": None}

# In-process: native calls of at most NATIVE["inline"] bytes per rank run from copies in the
# meeting (the transport's kInProcessNativeInlineBytes, collective/transport/inprocess.h: the
# spec's inline=BYTES; a record keeps it, one without it was taken at 4 KiB), and what a pass
# of blocks waits after the meeting (the spec's wait=US; None: nothing), per rank count (found
# by calibrate()).
NATIVE = {"inline": 1 << 10}
WAIT = {"us": None}

# In-process: the last-level cache the ranks share, in bytes (the spec's cache=BYTES: a native
# pass whose inputs take at most half of it reads them from there; None: not known).
CACHE = {"bytes": None}


def last_level_cache():
    """The largest data or unified cache of CPU 0 in bytes (Linux sysfs), or None."""
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, index, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, index, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        m = re.match(r"^(\d+)([KMG]?)$", size)
        if kind == "Instruction" or not m:
            continue
        got = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
        best = max(best or 0, got)
    return best


# Over MPI: what the kernel takes per 4 KiB page of fresh memory a process touches (the spec's
# fault=US; Open MPI's temporaries beyond glibc's largest mmap threshold), found by calibrate().
FAULT = {"us": None}

# Over MPI, a protocol step below the eager size, per rank count (the spec's step=BYTES/US):
# messages beyond `bytes` pay `us` more (None: no step), found by calibrate().
STEP = {"bytes": None, "us": None}

# The latency of a message in an exchange (its receiver posts a send with it: a ring step), where
# it is not the latency of a lone message (the spec's exchange=US; None: the latency), per rank
# count (found by calibrate()).
EXCHANGE = {"us": None}


def fault_cost(reps=5, size=64 << 20):
    return taped(["fault", reps, size], lambda: _fault_cost(reps, size))


def _fault_cost(reps, size):
    """Microseconds of one core per 4 KiB page a process maps in: a fresh block of the C
    library's malloc written once and freed, against writing memory already mapped (median of
    `reps`). A block this large is a fresh mapping each time under glibc's defaults, as Open
    MPI's temporary is; through malloc the measurement follows the allocator settings the ranks
    inherit (GLIBC_TUNABLES=glibc.malloc.hugetlb=1 maps it in 2 MiB pages, and the cost per
    4 KiB page falls accordingly)."""
    import ctypes
    import time
    import numpy as np
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    warm = np.ones(size // 4, np.float32)
    per_page = []
    for _ in range(reps):
        t = time.perf_counter()
        warm.fill(2)
        mapped = time.perf_counter() - t
        t = time.perf_counter()
        block = libc.malloc(size)
        if not block:
            sys.exit("calibrate_host: malloc(%d) failed" % size)
        fresh = np.ctypeslib.as_array(ctypes.cast(block, ctypes.POINTER(ctypes.c_float)),
                                      shape=(size // 4,))
        fresh.fill(2)
        del fresh
        libc.free(block)
        per_page.append((time.perf_counter() - t - mapped) * 1e6 / (size / 4096))
    return max(0.0, statistics.median(per_page))


# What one core's copy costs where another core wrote its source, its destination or both last,
# or read the destination since the copier wrote it (the spec's dirty=BYTES/CLEAN/SRC/DST/BOTH
# [/READ],...: GB/s per copy size; None: not priced), per rank count, from `loom bench copies`
# (found by calibrate()): in-process a thread's memcpy, over MPI
# (--processes) a process's process_vm_readv from another's memory, as Open MPI's single-copy
# transfers (CMA) are.
DIRTY = {"points": None}
# Over MPI: messages of at most this many bytes travel through Open MPI's shared-memory
# fragments (the sender copies in, the receiver out: who wrote the buffers last does not change
# their cost), larger ones by CMA from the sender's buffer (the spec's fragment=BYTES). The
# eager limit (btl_vader_eager_limit, ompi_info) counts the headers too: with the default 4 KiB,
# a 4,032-byte payload went through a fragment and a 4,064-byte one by process_vm_readv
# (strace). Found by main() from ompi_info; a record keeps it.
FRAGMENT = {"bytes": None}
FRAGMENT_HEADERS = 64


def vader_fragment_bytes():
    """The largest payload Open MPI's shared-memory BTL sends in a fragment: its eager limit
    (ompi_info) less the headers; the default limit's where ompi_info does not say."""
    limit = 4096
    try:
        out = subprocess.run(["ompi_info", "--parsable", "--param", "btl", "vader", "--level",
                              "9"], capture_output=True, text=True, timeout=60).stdout
        m = re.search(r"btl_vader_eager_limit:value:(\d+)", out)
        if m:
            limit = int(m.group(1))
    except (OSError, subprocess.SubprocessError):
        pass
    return max(0, limit - FRAGMENT_HEADERS)
# The copy sizes below the levels' that copies() measures too (calls of 4-16 KiB move pieces of
# a few KiB); each level adds its own per-rank size.
DIRTY_SMALL = (4 << 10, 16 << 10)
def copies_row(line):
    """A row of `loom bench copies` as (bytes, [its times]): the size, then as many times
    (clean, src, dst, both and read; an earlier version printed no read) as rates; None for
    any other line."""
    fields = line.split()
    try:
        numbers = [float(x) for x in fields]
    except ValueError:
        return None
    if len(numbers) < 9 or len(numbers) % 2 == 0:
        return None
    return int(numbers[0]), numbers[1:1 + (len(numbers) - 1) // 2]


def copies_key(size, rounds=5, processes=False):
    """copies()' key on the tape."""
    return ["copies", size, rounds] + (["processes"] if processes else [])


def copies(loom, size, rounds=5, processes=False):
    """`loom bench copies` of one size: the microseconds of a copy whose buffers were written
    last by the copying core (clean), the source by another (src), the destination (dst), both,
    each the fastest of `rounds` rounds' medians; with `processes` between two processes
    (--processes: process_vm_readv)."""
    return taped(copies_key(size, rounds, processes),
                 lambda: _copies(loom, size, rounds, processes))


def _copies(loom, size, rounds, processes):
    cmd = [loom, "bench", "copies", "-b", str(size), "-e", str(size), "--rounds", str(rounds)]
    if processes:
        cmd.append("--processes")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit("calibrate_host: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    for line in out.stdout.splitlines():
        row = copies_row(line)
        if row and row[0] == size:
            return row[1]
    sys.exit("calibrate_host: %s printed no row of %d bytes:\n%s"
             % (" ".join(cmd), size, out.stdout[-2000:]))


def median_copies(runs, loom, size, processes=False):
    """copies() taken `runs` times: each case's median across them, or with --across min its
    fastest (ACROSS); as GB/s, the spec's (bytes, clean, src, dst, both[, read])."""
    samples = [copies(loom, size, processes=processes) for _ in range(runs)]
    pick = min if ACROSS["pick"] == "min" else statistics.median
    us = [pick(sample[i] for sample in samples) for i in range(len(samples[0]))]
    if not processes:
        # In-process the read case is measured but not priced: the record of 2026-12-04 22:28
        # gave 68 / 69 / 66 of 80 with it and 72 / 70 / 69 without (with it the 2-rank ring,
        # tree and star at 256 KiB-1 MiB +36-64 %): a thread's rewrite of lines the peer's
        # thread copied out does not cost the schedules' steps what the table shows, where over
        # MPI, after a peer's single-copy receive, it does (the record of 21:56: What changed).
        us = us[:4]
    return (size,) + tuple(size / max(t, 1e-3) / 1e3 for t in us)


def spec_of(ranks, cores, latency, levels):
    """The host spec: levels are (working_set, copy, reduce, mem_copy, mem_reduce[, local]);
    a local rate of 0 is left out (local copies at the copy rate)."""
    text = ",".join(("%d/%r/%r/%r/%r/%r" if len(level) > 5 and level[5] > 0 else
                     "%d/%r/%r/%r/%r") % tuple(level[:6] if len(level) > 5 and level[5] > 0
                                               else level[:5]) for level in levels)
    spec = "host:%d:cores=%d:latency=%r:levels=%s" % (ranks, cores, latency, text)
    if EAGER["bytes"] is not None:
        spec += ":eager=%d:rendezvous=%r" % (EAGER["bytes"], EAGER["us"])
    if STEP["bytes"] is not None:
        spec += ":step=%d/%r" % (STEP["bytes"], STEP["us"])
    if MSG["points"]:
        spec += ":msg=" + ",".join("%d/%r" % point for point in MSG["points"])
    if DIRTY["points"]:
        spec += ":dirty=" + ",".join("/".join(["%d" % point[0]] + ["%r" % x for x in point[1:]])
                                     for point in DIRTY["points"])
        if FRAGMENT["bytes"]:
            spec += ":fragment=%d" % FRAGMENT["bytes"]
    if TRANSPORT["matcher_copies"]:
        spec += ":copier=matcher:handoff=%d" % TRANSPORT["handoff"]
    spec += ":native=%s" % TRANSPORT["native"]
    if STREAM["f"] is not None:
        spec += ":stream=%r" % STREAM["f"]
    if TRANSPORT["native"] == "pass":
        spec += ":inline=%d" % NATIVE["inline"]
    if WAIT["us"] is not None:
        spec += ":wait=%r" % WAIT["us"]
    if PASS["levels"]:
        spec += ":pass=" + ",".join("%d/%r/%r" % level for level in PASS["levels"])
    if TRANSPORT["native"] == "pass" and CACHE["bytes"]:
        spec += ":cache=%d" % CACHE["bytes"]
    if FAULT["us"]:
        spec += ":fault=%r" % FAULT["us"]
    if EXCHANGE["us"] is not None:
        spec += ":exchange=%r" % EXCHANGE["us"]
    return spec


def simulate(ranks, cores, latency, call, levels, op, algo, size, in_place=False):
    """One call on the host model. Posting is folded into the per-message latency (post_us 0).
    in_place: send and receive one buffer (a broadcast's root copies nothing; an op named
    "...:inplace" says the same)."""
    if op.endswith(":inplace"):
        op, in_place = op.split(":")[0], True
    return sim.collectives(spec_of(ranks, cores, latency, levels), [size], op=op, algorithm=algo,
                           call_us=call, post_us=0, chunk_bytes=TRANSPORT["chunk"],
                           mpi_exchange=TRANSPORT["mpi_exchange"],
                           root_copy_first=SCHEDULE["root_copy_first"],
                           in_place=in_place)[0]["time_us"]


def bisect(f, target, lo, hi, increasing):
    """x in [lo, hi] with f(x) = target for a monotone f (geometric steps)."""
    for _ in range(60):
        mid = (lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2


def fit_pass(ranks, cores, latency, call, levels, s, ws, broadcast, reduce):
    """The native pass's rates at one level, (ws, copy, reduce) all ranks together: the copy
    rate replays a native broadcast of s bytes (copies only), the reduce rate then its native
    reduce."""
    def fit(op, measured, make):
        def f(g):
            PASS["levels"] = [make(g)]
            return simulate(ranks, cores, latency, call, levels, op, "native", s)
        return bisect(f, measured, 0.01, 1000.0, increasing=False)

    copy = fit("broadcast", broadcast, lambda g: (ws, g, 10.0))
    return (ws, copy, fit("reduce", reduce, lambda g: (ws, copy, g)))


# The transports whose small messages' own cost the broadcast sweep prices (MSG): over MPI a
# message of a few KiB costs the receiver more per byte than the 64 KiB level's rates give on a
# host whose cores keep what they write in caches of their own (Open MPI's eager path: the
# sender writes the payload into a shared fragment, the receiver reads it from the sender's
# core); in-process the sweep's broadcasts are what its latency and rates already give.
MSG_TRANSPORTS = ("libnbc",)


def fit_messages(ranks, cores, latency, call, sweep, level_bytes, level):
    """MSG from a 2-rank broadcast sweep (one message of each size, up to the smallest level's
    per-rank size): what each size below that level's took beyond what the model gives it at
    the level's rates (never negative), none at the level's own size. The sweep is one command
    of its own, taken minutes from the level's broadcast and from the latency's, and on this VM
    a command can run in a slow mode throughout (every call 1.7-3x): so its growth from its
    smallest size is scaled to the model's growth over the same sizes, and only its shape (a
    message of a few KiB dearer per byte than one of 64 KiB) is priced, not its offset or its
    speed (a sweep slower than the model only scaled down)."""
    sizes = sorted(sz for (_, sz) in sweep)
    if len(sizes) < 3 or sizes[-1] != level_bytes:
        return
    MSG["points"] = None
    base = {sz: simulate(ranks, cores, latency, call, [level], BROADCAST["op"], "tree", sz)
            for sz in sizes}
    t = {sz: sweep[("tree", sz)] for sz in sizes}
    lo, hi = sizes[0], sizes[-1]
    if t[hi] <= t[lo] or base[hi] <= base[lo]:
        return
    # Never scaled up: a sweep faster than the level's broadcast is the level's slow mode, and
    # its shape scaled up read as microseconds a message no run paid (2026-12-01 20:16).
    k = min(1.0, (base[hi] - base[lo]) / (t[hi] - t[lo]))
    points = [(sz, max(0.0, base[lo] + k * (t[sz] - t[lo]) - base[sz])) for sz in sizes[:-1]]
    if not any(us > 0 for _, us in points):
        return
    MSG["points"] = points + [(hi, 0.0)]
    print("# calibration, %d ranks: a broadcast's one message beyond the model's latency and "
          "rates, the sweep scaled by %.2f to the model's growth from %d B to %d B (%s) -> "
          "messages pay that, linear between the sizes" % (ranks, k, lo, hi, " ".join(
              "%d:%.2f" % point for point in points)))


def calibrate(a, cores, runs, ranks):
    """Step 1: the host model of `ranks` ranks from primitives (medians of `runs` runs). The
    2-rank calibration also finds the transport's protocol step (EAGER), which 4 ranks use."""
    big = 64 << 20
    # Rates do not matter for the small calls that calibrate the latencies.
    flat = [(1 << 20, 10.0, 10.0, 0.0, 0.0)]

    def small(ranks, op, algos):
        # 4 and 64 bytes: the first row of a process absorbs its start; the 64-byte row is used.
        m = median_bench(runs, a.loom, a.transport, ranks, op, algos, 4, 64, 2000, 200)
        return {al: m[(al, 64)] for al in algos}

    # 1a. Latency and call cost per rank count (in-process also the exchange latency).
    timing = {}
    msg_sweep = None
    DIRTY["points"] = None  # until the levels' copies are measured (below)
    EXCHANGE["us"] = None
    STEP.update(bytes=None, us=None)
    if TRANSPORT["native"] == "pass":
        # In-process every call starts with the ranks' meeting: a 64-byte native broadcast is
        # that meeting and nothing else (its copies cost ~nothing), the call's fixed cost; a
        # 64-byte broadcast down the tree adds its messages, whose latency it gives.
        m = small(ranks, "broadcast", ["native", "tree"])
        call = max(0.0, m["native"] - simulate(ranks, cores, 0.0, 0.0, flat, "broadcast",
                                                  "native", 64))
        latency = bisect(lambda x: simulate(ranks, cores, x, call, flat, "broadcast", "tree", 64),
                         m["tree"], 0.0, 10000.0, increasing=True)
        # A 64-byte allgather around the ring: every step an exchange, each rank's thread busy
        # with its own send when its message arrives (2 ranks: 0.8-0.9 us a step against
        # 1.1-1.3 us for a message down the tree).
        gather = small(ranks, "allgather", ["ring"])["ring"]

        def gathered(x):
            EXCHANGE["us"] = x
            return simulate(ranks, cores, latency, call, flat, "allgather", "ring", 64)
        exchange = bisect(gathered, gather, 0.0, 10000.0, increasing=True)
        EXCHANGE["us"] = exchange
        timing[ranks] = (latency, call)
        print("# calibration, %d ranks: a native broadcast (the meeting) %.2f us, one down the "
              "tree %.2f us, an allgather around the ring %.2f us -> latency %.2f us per "
              "message, %.2f in an exchange, call %.2f us"
              % (ranks, m["native"], m["tree"], gather, latency, exchange, call))
    elif ranks == 2:
        one = small(1, "broadcast", ["tree"])["tree"]
        two = small(2, "broadcast", ["tree"])["tree"]
        call2 = max(0.0, one - simulate(1, cores, 0.0, 0.0, flat, "broadcast", "tree", 64))
        latency2 = bisect(lambda x: simulate(2, cores, x, call2, flat, "broadcast", "tree", 64),
                          two, 0.0, 10000.0, increasing=True)
        timing[2] = (latency2, call2)
        print("# calibration: a 1-rank call %.2f us; a 2-rank broadcast %.2f us -> latency %.2f "
              "us per message, call %.2f us" % (one, two, latency2, call2))
    else:
        # A ring step (every rank sends and receives at once) against a message down the tree:
        # 4 processes on 2 cores take turns on the cores, and a step in which all of them wait
        # costs more than a hop in which one does (64 B: the ring's allgather, 3 steps, 12.5 us
        # against the tree's broadcast, 2 hops, 7.9; a broadcast along the chain, 3 hops, costs
        # no more than the tree's and cannot tell the latency from the call).
        gather4 = small(4, "allgather", ["ring"])["ring"]
        tree4 = small(4, "broadcast", ["tree"])["tree"]
        latency4 = bisect(lambda x: simulate(4, cores, x, 0, flat, "allgather", "ring", 64) -
                          simulate(4, cores, x, 0, flat, "broadcast", "tree", 64),
                          max(gather4 - tree4, 0.0), 0.0, 10000.0, increasing=True)
        call4 = max(0.0, tree4 - simulate(4, cores, latency4, 0, flat, "broadcast", "tree", 64))
        timing[4] = (latency4, call4)
        print("# calibration, 4 ranks: an allgather around the ring %.2f us, a broadcast down "
              "the tree %.2f us -> latency %.2f us per message, call %.2f us"
              % (gather4, tree4, latency4, call4))
    if ranks == 2:
        # The eager limit: a 2-rank broadcast of 64 B-64 KiB; where its time jumps by more than a
        # microsecond and half the small call's (the largest such step), messages beyond the size
        # before it pay the step (a rendezvous handshake; the bytes themselves cost ~nothing here).
        sweep = median_bench(runs, a.loom, a.transport, 2, BROADCAST["op"], ["tree"], 64, 64 << 10,
                             1000, 100, factor=2)
        sizes = sorted(s for (_, s) in sweep)
        # The step whose time grows the most against the one before (bytes alone at most double
        # it), taken when it more than doubles, by more than a microsecond, and every larger size
        # stays above it (a burst of noise in a few rows is not a protocol).
        t = [sweep[("tree", size)] for size in sizes]
        steps = [(t[i] / t[i - 1], t[i] - t[i - 1], i) for i in range(1, len(sizes))]
        ratio, jump, at = max(steps)
        before = sizes[at - 1]
        EAGER.update(bytes=None, us=0.0)
        MSG["points"] = None
        msg_sweep = sweep if TRANSPORT["native"] in MSG_TRANSPORTS else None
        if ratio > 2.2 and jump > 1.0 and min(t[at:]) > t[at - 1] + 0.75 * jump:
            EAGER.update(bytes=before, us=jump)
            print("# calibration: a 2-rank broadcast jumps %.2f us past %d B (%s) -> messages "
                  "beyond it pay a %.2f us rendezvous" % (jump, before, " ".join(
                      "%d:%.1f" % (s, sweep[("tree", s)]) for s in sizes), jump))
        else:
            print("# calibration: no rendezvous step in a 2-rank broadcast of 64 B-64 KiB "
                  "(largest step x%.2f, %.2f us)" % (ratio, jump))

    # 1a'. Over MPI where processes outnumber the cores: a step below the eager size. A ring's
    # allgather of messages of 64 B up to the eager size (every process sending and receiving
    # at once, as in a ring allreduce's steps); where its time grows by more than a microsecond
    # and 5 % of the size before's, and every larger size stays above it, messages beyond the
    # size before pay that step, fitted to the jump (4 processes on 2 cores: +3-5 us for the 3
    # steps past 256 B messages, where a 2-rank broadcast grows by 0.1 us; the 4-rank ring and
    # multi_tree allreduce of 4 KiB, messages of 1 KiB, came out -20 to -42 % without it). (A
    # record of the version before has no such sweep: no step. Without a rendezvous found, the
    # sweep ends at Open MPI's 2 KiB seen here.)
    eager = EAGER["bytes"] or 2048
    if (TRANSPORT["native"] == "libnbc" and ranks > cores and
            on_tape(a.transport, ranks, "allgather", ["ring"], 64 * ranks, eager * ranks, 1000,
                    100, 2)):
        sweep = median_bench(runs, a.loom, a.transport, ranks, "allgather", ["ring"],
                             64 * ranks, eager * ranks, 1000, 100, factor=2)
        sizes = sorted(s for (_, s) in sweep)
        t = [sweep[("ring", size)] for size in sizes]
        jump, at = max((t[i] - t[i - 1], i) for i in range(1, len(sizes)))
        shown = " ".join("%d:%.1f" % (size // ranks, x) for size, x in zip(sizes, t))
        if jump > 1.0 and jump > 0.05 * t[at - 1] and min(t[at:]) > t[at - 1] + 0.75 * jump:
            before = sizes[at - 1] // ranks
            STEP.update(bytes=before, us=0.0)

            def stepped(x):
                STEP["us"] = x
                return (simulate(ranks, cores, *timing[ranks], flat, "allgather", "ring",
                                 sizes[at]) -
                        simulate(ranks, cores, *timing[ranks], flat, "allgather", "ring",
                                 sizes[at - 1]))
            STEP["us"] = bisect(stepped, jump, 0.0, 1000.0, increasing=True)
            print("# calibration, %d ranks: a ring allgather's messages (%s) jump %.2f us past "
                  "%d B -> messages beyond it pay %.2f us" % (ranks, shown, jump, before,
                                                             STEP["us"]))
        else:
            print("# calibration, %d ranks: no step in a ring allgather's messages (%s)"
                  % (ranks, shown))

    # 1b. Over MPI: a rank's local copy (memcpy) is not a transfer (which crosses the kernel,
    # Open MPI's single-copy CMA): its rate per working set from 1-rank calls (a copy of the
    # input to the output) of the levels' working sets; and the kernel's cost per fresh page.
    local = {}
    FAULT["us"] = None
    if TRANSPORT["native"] == "libnbc":
        one = small(1, "allreduce", ["ring"])["ring"]
        call1 = max(0.0, one - simulate(1, cores, 0.0, 0.0, flat, "allreduce", "ring", 64))
        copies = median_bench(runs, a.loom, a.transport, 1, "allreduce", ["ring"],
                              ranks * (64 << 10), ranks * big, 50, 2)
        for (_, size), t in sorted(copies.items()):
            local[2 * size] = bisect(
                lambda g: simulate(1, cores, 0.0, call1, [(2 * size, 10.0, 10.0, 0.0, 0.0, g)],
                                   "allreduce", "ring", size), t, 0.01, 1000.0, increasing=False)
        fault = statistics.median(fault_cost() for _ in range(runs))
        print("# calibration, %d ranks: 1-rank copies (a 64 B call %.2f us) %s -> local copy "
              "%s GB/s; a fresh page %.2f us" % (
                  ranks, one, " ".join("%d:%.0f" % (s, t) for (_, s), t in sorted(copies.items())),
                  " ".join("%.1f" % g for _, g in sorted(local.items())), fault))
        FAULT["us"] = fault

    # 1c. Rates per working-set level and rank count, from calls of s bytes on as many ranks as
    # the predictions (buffers of 2 x ranks x s bytes): threads or processes sharing the cores
    # share their caches and memory differently with 2 ranks than with 4.
    levels = []
    latency, call = timing[ranks]
    passes = []
    # 1c'. One core's copies of lines another core wrote last, per copy size, taken beside each
    # level's primitives (this VM's cross-core line transfers have a slow mode that comes and
    # goes: 64 KiB from the other core 1.5 us in one minute, 4.3 in another): in-process a
    # thread's memcpy, over MPI a process's process_vm_readv (an allreduce's message carries
    # what the sending process has just written; the calibrating broadcast in place sends lines
    # nobody rewrites). (A record of an earlier version has none: not priced.)
    processes = TRANSPORT["native"] == "libnbc"
    dirty = a.copies != "off" and on_tape_copies(DIRTY_SMALL[0], processes=processes)
    if dirty:
        DIRTY["points"] = [median_copies(runs, a.loom, size, processes)
                           for size in DIRTY_SMALL]
    elif a.copies and a.copies != "off":
        DIRTY["points"] = a.copies
    for s in (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, big):
        iters = max(10, min(1000, (64 << 20) // s * 10))
        if dirty:
            DIRTY["points"] = DIRTY["points"] + [median_copies(runs, a.loom, s, processes)]

        def meas(op, algo, size):
            return median_bench(runs, a.loom, a.transport, ranks, op, [algo], size, size,
                                iters, 2)[(algo, size)]

        def fit(op, algo, size, measured, make, in_place=False):
            return bisect(lambda g: simulate(ranks, cores, latency, call, [make(g)], op, algo,
                                             size, in_place), measured, 0.01, FIT_MAX_GBPS,
                          increasing=False)

        ws = 2 * ranks * s
        loc = local.get(ws, 0.0)
        # The ring's allgather of `whole` bytes touches (ranks + 1) x whole (every rank's part
        # and the whole): sized to the same working set. Its reduce-scatter of `whole` touches
        # 2 x whole per rank (the input, the scratch it reduces the other ranks' parts into, its
        # part of the result), so the same working set is a reduce-scatter of s. (A record of
        # the version before sized both as the allgather: on 4 ranks 1.6 x the level's working
        # set, where 4 ranks of 4 MiB fill this VM's 32 MiB L3.)
        whole = ws // (ranks + 1) // (64 * ranks) * (64 * ranks)
        rs_whole = s // (64 * ranks) * (64 * ranks)
        if not on_tape(a.transport, ranks, "reducescatter", ["ring"], rs_whole, rs_whole, iters,
                       2):
            rs_whole = whole
        cp, rd = meas(BROADCAST["op"], "tree", s), meas("reduce", "tree", s)
        # On more than 2 ranks one rank reducing alone is a star's reduce (its root reduces
        # every other rank's buffer in turn while they wait); a tree's reduce reduces on two
        # ranks at once from 4 ranks on, which on 2 cores cannot tell one rank's rate from the
        # cores' together (the star's root then came out as fast as the tree's: the 4-rank star
        # allreduce at 4 MiB -40 %). On 2 ranks the tree is the star. (A record of the version
        # before has no star reduce: the tree's then.)
        rd_star = None
        if ranks > 2 and on_tape(a.transport, ranks, "reduce", ["star"], s, s, iters, 2):
            rd_star = meas("reduce", "star", s)
        ag = meas("allgather", "ring", whole)
        rs = meas("reducescatter", "ring", rs_whole)
        # In-process, where the native pass has rates of its own at this level (outputs below
        # STREAMING_BYTES), the levels' shared rates price transfers alone: there, with a core
        # per rank, what both ranks get at once may be less than what one gets alone (2 ranks,
        # 64 KiB per rank: an allgather of 43 KiB parts 10 us where a broadcast of 64 KiB takes
        # 4; the ring's and the multi-tree's allreduce at 16-64 KiB then read -20 to -31 %
        # with the shared rates at least one rank's). Elsewhere at least one rank's rate: on 4
        # ranks on 2 cores the shared rates are what 4 at once get, not 2, and over MPI a
        # launch's slow mode falls on the allgather the most (2 ranks, 1 MiB: 408 us in one
        # run, 96-111 in the others).
        own_pass = (TRANSPORT["native"] == "pass" and s * ranks < STREAMING_BYTES and
                    on_tape(a.transport, ranks, "broadcast", ["native"], s, s, iters, 2))
        floor = 0.0 if own_pass and ranks <= cores else 1.0
        # The one-rank rates first as if no copies overlapped, then again with the shared
        # rates found (a tree of more than 2 ranks copies on several at once).
        mem = mem_reduce = 0.0
        for _ in range(2 if ranks > 2 else 1):
            level = lambda g: (ws, g, 10.0, mem and max(mem, floor * g), mem_reduce, loc)
            copy = fit(BROADCAST["op"], "tree", s, cp, level)
            if copy > 0.99 * FIT_MAX_GBPS and not SCHEDULE["root_copy_first"]:
                # The root's memcpy into its own buffer runs beside the transfer (over MPI the
                # child copies the message): a broadcast no longer than that memcpy bounds the
                # transfer from above only, so its rate is the one that takes the whole time.
                copy = fit("broadcast", "tree", s, cp, level, in_place=True)
            alone, alone_us = ("tree", rd) if rd_star is None else ("star", rd_star)
            reduce = fit("reduce", alone, s, alone_us,
                         lambda g: (ws, copy, g, mem, mem_reduce and max(mem_reduce, floor * g),
                                    loc))
            if msg_sweep is not None:  # once, at the smallest level (the sweep's top size)
                fit_messages(ranks, cores, latency, call, msg_sweep, s,
                             (ws, copy, reduce, mem, mem_reduce, loc))
                msg_sweep = None
            # All ranks at once: at most one stream per core, and at least one rank's rate
            # where `floor` says so.
            mem = min(cores * copy, max(floor * copy, fit(
                "allgather", "ring", whole, ag,
                lambda g: (ws, copy, reduce, g, mem_reduce, loc))))
            # The ring's reduce-scatter reduces on every rank at once; with a star's one-rank
            # rate, a tree's reduce (two ranks at once from 4 ranks on) also shows what ranks
            # reducing together get: at least what either shows.
            shared = fit("reducescatter", "ring", rs_whole, rs,
                         lambda g: (ws, copy, reduce, mem, g, loc))
            if rd_star is not None:
                shared = max(shared, fit("reduce", "tree", s, rd,
                                         lambda g: (ws, copy, reduce, mem, g, loc)))
            mem_reduce = min(cores * reduce, max(floor * reduce, shared))
        levels.append((ws, copy, reduce, mem, mem_reduce, loc))
        print("# calibration, %d ranks, %d B (buffers %d B): broadcast %.0f, reduce %.0f%s, "
              "allgather %.0f, reduce-scatter of %d B %.0f us -> copy %.2f, reduce %.2f, "
              "together %.2f / %.2f GB/s"
              % (ranks, s, ws, cp, rd, "" if rd_star is None else " (star %.0f)" % rd_star, ag,
                 rs_whole, rs, copy, reduce, mem, mem_reduce))
        # In-process, where the native pass writes through the caches (outputs below
        # STREAMING_BYTES): its own rates, all ranks together, from a native broadcast (each
        # block read once and written to every rank: copies) and a native reduce (every rank's
        # block summed, one written). The pass reads inputs no rank writes during the call and
        # each rank writes its own blocks; a ring's or tree's transfer reads what another core
        # has just written, at other rates. (A record of an earlier version without these
        # measurements replays with the levels' rates.)
        if own_pass:
            passes.append((s, ws, meas("broadcast", "native", s), meas("reduce", "native", s)))
    # In-process: the pass of blocks' second wait (every rank's blocks written), from a native
    # broadcast of twice the inline size (the smallest pass of blocks, whose copies take
    # little) against a 64-byte one (the meeting alone) in the same launches, their rounds
    # alternating (this VM's slow mode, which triples a call of a microsecond for seconds to
    # minutes, then falls on both); then each level's pass rates with it. The wait is fitted on
    # the pass rates and they on the wait: twice round. (A record of the version before the
    # wait fits the pass rates alone.)
    PASS["levels"], WAIT["us"] = None, None
    blocks = 2 * NATIVE["inline"]
    pair = None
    if passes and on_tape(a.transport, ranks, "broadcast", ["native"], 64, blocks, 2000, 200,
                          blocks // 64):
        pair = median_bench(runs, a.loom, a.transport, ranks, "broadcast", ["native"], 64,
                            blocks, 2000, 200, blocks // 64)
    if pair is not None:
        # The meeting of these launches (a call from copies: no wait, no pass rates).
        met = max(0.0, pair[("native", 64)] - simulate(ranks, cores, latency, 0.0, levels,
                                                       "broadcast", "native", 64))
    for _ in range(2 if pair is not None else 1 if passes else 0):
        if pair is not None:
            WAIT["us"] = 0.0
            WAIT["us"] = max(0.0, pair[("native", blocks)] - simulate(
                ranks, cores, latency, met, levels, "broadcast", "native", blocks))
        PASS["levels"] = [fit_pass(ranks, cores, latency, call, levels, s, ws, nb, nr)
                          for s, ws, nb, nr in passes]
    if pair is not None:
        print("# calibration, %d ranks: a native broadcast of %d B (a pass of blocks) %.2f us, "
              "of 64 B %.2f us -> the pass waits %.2f us for its blocks"
              % (ranks, blocks, pair[("native", blocks)], pair[("native", 64)], WAIT["us"]))
    for (s, _, nb, nr), (_, pass_copy, pass_reduce) in zip(passes, PASS["levels"] or []):
        print("# calibration, %d ranks, %d B: the native pass: broadcast %.1f, reduce %.1f "
              "us -> copy %.2f, reduce %.2f GB/s all ranks together"
              % (ranks, s, nb, nr, pass_copy, pass_reduce))
    # 1d. In-process: the native pass's streaming stores (outputs of 16 MiB and more), from a
    # native broadcast (each block read once and written to every rank) and a native reduce
    # (every rank's block read, one written) of the largest size, fitted to their sum: the pass
    # reads its inputs at another rate than it streams its outputs, and an allreduce's n reads
    # and n writes per block are in proportion to the sum's n + 1 and n + 1, so that one factor
    # fitted to the sum prices the allreduce whatever the two rates are.
    STREAM["f"] = None
    if TRANSPORT["native"] == "pass":
        native = {op: median_bench(runs, a.loom, a.transport, ranks, op, ["native"], big, big,
                                   10, 2)[("native", big)] for op in ("broadcast", "reduce")}

        def streamed(f):
            STREAM["f"] = f
            return sum(simulate(ranks, cores, latency, call, levels, op, "native", big)
                       for op in native)

        stream = bisect(streamed, sum(native.values()), 0.01, 100.0, increasing=True)
        STREAM["f"] = stream
        print("# calibration, %d ranks: a native broadcast and reduce of %d B %.0f + %.0f us -> "
              "streaming stores cost %.3f x a copy's bytes at the memory's rates"
              % (ranks, big, native["broadcast"], native["reduce"], stream))
    print("# host model (%s, %d cores, %d ranks): %s, latency and call above"
          % (a.transport, cores, ranks, spec_of(0, cores, 0, levels).split(":", 2)[2]))
    if DIRTY["points"]:
        print("# calibration, %d ranks: one core's copies (GB/s clean / source / destination / "
              "both another core's%s) %s" % (ranks, " / read since" if len(
                  DIRTY["points"][0]) > 5 else "", " ".join(
                  "%d:" % point[0] + "/".join("%.1f" % x for x in point[1:])
                  for point in DIRTY["points"])))
    return {"timing": timing, "levels": {ranks: levels}, "eager": dict(EAGER),
            "msg": MSG["points"], "dirty": {ranks: DIRTY["points"]},
            "stream": {ranks: STREAM["f"]}, "pass": {ranks: PASS["levels"]},
            "wait": {ranks: WAIT["us"]}, "fault": {ranks: FAULT["us"]},
            "exchange": {ranks: EXCHANGE["us"]},
            "step": {ranks: None if STEP["bytes"] is None else (STEP["bytes"], STEP["us"])}}



def measure(a, ranks, runs):
    """The allreduces predicted, measured (medians of `runs` runs) with each row's range."""
    # Small calls many times (they take microseconds), large ones a few: every row runs for
    # tens of milliseconds, so that what a row's start costs (its barrier, a waiting thread's
    # wake-up) does not count.
    meas = median_bench(runs, a.loom, a.transport, ranks, "allreduce", ALGOS, 4096, 256 << 10,
                        300, 30)
    meas.update(median_bench(runs, a.loom, a.transport, ranks, "allreduce", ALGOS, 1 << 20,
                             4 << 20, 100, 5))
    meas.update(median_bench(runs, a.loom, a.transport, ranks, "allreduce", ALGOS, 16 << 20,
                             64 << 20, 10, 2))
    return meas, {k: RANGE[k] for k in meas}


def predict(model, cores, ranks, sizes):
    """Every (algorithm, size) on the host model calibrated as `model`."""
    EAGER.update(model["eager"])
    MSG["points"] = model.get("msg")
    DIRTY["points"] = model.get("dirty", {}).get(ranks)
    STREAM["f"] = model["stream"][ranks]
    PASS["levels"] = model["pass"][ranks]
    WAIT["us"] = model["wait"][ranks]
    FAULT["us"] = model["fault"][ranks]
    EXCHANGE["us"] = model["exchange"][ranks]
    STEP["bytes"], STEP["us"] = model["step"][ranks] or (None, None)
    latency, call = model["timing"][ranks]
    return {(algo, s): simulate(ranks, cores, latency, call, model["levels"][ranks], "allreduce",
                                algo, s)
            for algo in ALGOS for s in sizes}


def merged(parts):
    """One model from the calibrations of each rank count (the first found the protocol step)."""
    return {"timing": {k: v for p in parts for k, v in p["timing"].items()},
            "levels": {k: v for p in parts for k, v in p["levels"].items()},
            "eager": parts[0]["eager"],
            "msg": parts[0].get("msg"),
            "dirty": {k: v for p in parts for k, v in p.get("dirty", {}).items()},
            "stream": {k: v for p in parts for k, v in p["stream"].items()},
            "pass": {k: v for p in parts for k, v in p["pass"].items()},
            "wait": {k: v for p in parts for k, v in p["wait"].items()},
            "fault": {k: v for p in parts for k, v in p["fault"].items()},
            "exchange": {k: v for p in parts for k, v in p["exchange"].items()},
            "step": {k: v for p in parts for k, v in p["step"].items()}}


def pooled_model(models):
    """One model from several runs' calibrations: every parameter the median of the runs'; the
    protocol step the one most runs found."""
    med = statistics.median
    timing = {r: tuple(med(m["timing"][r][i] for m in models) for i in (0, 1))
              for r in models[0]["timing"]}
    levels = {r: [tuple(med(m["levels"][r][j][i] for m in models)
                        for i in range(len(models[0]["levels"][r][j])))
                  for j in range(len(models[0]["levels"][r]))] for r in models[0]["levels"]}
    found = [m["eager"]["bytes"] for m in models]
    eager = max(set(found), key=found.count)
    us = [m["eager"]["us"] for m in models if m["eager"]["bytes"] == eager]
    def scalar(name):  # per rank count: the runs' median, or None where the runs have none
        return {r: None if models[0][name][r] is None else med(m[name][r] for m in models)
                for r in models[0][name]}

    def most_steps(r):  # the step most runs found, its time the median of theirs
        found = [None if m["step"][r] is None else m["step"][r][0] for m in models]
        at = max(set(found), key=found.count)
        return None if at is None else (at, med(m["step"][r][1] for m in models
                                                if m["step"][r] and m["step"][r][0] == at))

    steps = {r: most_steps(r) for r in models[0]["step"]}
    passes = {r: None if models[0]["pass"][r] is None else
              [tuple(med(m["pass"][r][j][i] for m in models) for i in range(3))
               for j in range(len(models[0]["pass"][r]))] for r in models[0]["pass"]}
    msgs = [m.get("msg") for m in models]
    msg = None
    if all(msgs) and len(set(tuple(b for b, _ in m) for m in msgs)) == 1:
        msg = [(b, med(m[i][1] for m in msgs)) for i, (b, _) in enumerate(msgs[0])]
    dirty = {r: None if not models[0].get("dirty", {}).get(r) else
             [tuple(med(m["dirty"][r][j][i] for m in models)
                    for i in range(len(models[0]["dirty"][r][j])))
              for j in range(len(models[0]["dirty"][r]))] for r in models[0].get("dirty", {})}
    return {"timing": timing, "levels": levels, "eager": {"bytes": eager, "us": med(us)},
            "msg": msg, "dirty": dirty,
            "stream": scalar("stream"), "pass": passes, "wait": scalar("wait"),
            "fault": scalar("fault"), "exchange": scalar("exchange"), "step": steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transport", choices=["inprocess", "mpi"], default="inprocess")
    p.add_argument("--loom", default=os.path.join(ROOT, "build", "tools", "loom"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=9,
                   help="round-robin rounds within each run (loom bench --rounds)")
    p.add_argument("--stat", choices=["min", "median"], default="min",
                   help="what a row reports of its rounds (loom bench --stat): the fastest (the "
                        "machine undisturbed, as the simulator models it) or the median")
    p.add_argument("--launches", type=int, default=2,
                   help="with --stat min, each measurement is the fastest of this many launches "
                        "of its command (a launch of a shared VM can run slow throughout)")
    p.add_argument("--small-launches", type=int, default=5,
                   help="with --stat min, commands of calls up to 256 KiB (the latency and "
                        "protocol primitives, the smaller levels, the smaller predicted rows) "
                        "take the fastest of this many launches (at least --launches)")
    p.add_argument("--across", choices=["median", "min"], default="median",
                   help="without --paired, what a measurement reports of its --runs runs (the "
                        "calibration's primitives and the rows alike): their median, or the "
                        "fastest (the machine at its fastest on both sides, as --stat min takes "
                        "within a run)")
    p.add_argument("--plot", help="write predicted vs measured busbw curves to this PNG")
    p.add_argument("--paired", action="store_true",
                   help="each run calibrates and measures at once; errors are the median of the "
                        "runs' own errors")
    p.add_argument("--record", metavar="FILE",
                   help="also write every measurement taken to this JSON file")
    p.add_argument("--replay", metavar="FILE",
                   help="take the measurements from a --record file of a run with the same "
                        "options instead of the machine (to check a change of the model)")
    p.add_argument("--cores", type=int,
                   help="the machine's core count (default: this machine's, or the recorded)")
    p.add_argument("--copies", metavar="BYTES/CLEAN/SRC/DST/BOTH[/READ],...|off",
                   help="where the run (or the replayed record) measures no `loom bench "
                        "copies`: one core's copy rates (GB/s) with both buffers its own, the "
                        "source, the destination and both another core's, and optionally the "
                        "destination its own but read by another core since, per size, taken some "
                        "other way (the spec's dirty=; over MPI between processes, `loom bench "
                        "copies --processes`); off: copies of other cores' lines not priced, nor "
                        "measured (a record's replayed without them)")
    p.add_argument("--cache", type=int, metavar="BYTES",
                   help="the last-level cache the cores share, in bytes (default: this "
                        "machine's, from /sys, or the recorded)")
    a = p.parse_args()
    if a.copies and a.copies != "off":
        try:
            a.copies = [tuple([int(f[0])] + [float(x) for x in f[1:]])
                        for f in (point.split("/") for point in a.copies.split(","))]
        except ValueError:
            p.error("--copies is BYTES/CLEAN/SRC/DST/BOTH[/READ],... (bytes and GB/s)")
        if any(len(point) not in (5, 6) or min(point) <= 0 for point in a.copies) or \
                [pt[0] for pt in a.copies] != sorted({pt[0] for pt in a.copies}):
            p.error("--copies is BYTES/CLEAN/SRC/DST/BOTH[/READ],... (sizes increasing, "
                    "positive)")
    if a.record and a.replay:
        p.error("--record and --replay exclude each other")
    cores = a.cores or os.cpu_count() or 1
    CACHE["bytes"] = a.cache or last_level_cache()
    if a.replay:
        with open(a.replay) as f:
            tape = json.load(f)
        TAPE.update(mode="replay", entries=tape["measurements"])
        cores = a.cores or tape["cores"]
        CACHE["bytes"] = a.cache or tape.get("cache") or CACHE["bytes"]
        NATIVE["inline"] = tape.get("inline", 4 << 10)
        FRAGMENT["bytes"] = tape.get("fragment")
        SCHEDULE["root_copy_first"] = tape.get("schedule", 1) < 2
        if SCHEDULE["root_copy_first"]:
            print("# the record measured the rooted broadcasts whose root copied send into recv "
                  "first: replayed with that schedule")
        if "--paired" in tape.get("argv", []) and not a.paired:
            TAPE["regroup"] = regrouped(TAPE["entries"])
    elif a.record:
        TAPE.update(mode="record")
    if a.launches < 1:
        p.error("--launches must be at least 1")
    if a.paired and a.across != "median":
        p.error("--across pools the runs of each measurement: not with --paired")
    ROUNDS.update(rounds=a.rounds, stat=a.stat, iters=0.5 if a.stat == "min" else 1.0,
                  launches=a.launches, small_launches=a.small_launches)
    ACROSS["pick"] = a.across
    if a.transport == "mpi":
        TRANSPORT.update(mpi_exchange=True, chunk=256 << 10, matcher_copies=False,
                         native="libnbc")
        if FRAGMENT["bytes"] is None:
            FRAGMENT["bytes"] = vader_fragment_bytes()
    # The calibrating broadcasts in place (BROADCAST), over MPI since 2026-12-04 20:18 and
    # in-process since 23:20: in-process a handed transfer (256 KiB and more) is copied by the
    # child's thread while the root's thread copies its own buffer beside it, sharing the
    # memory, and below that the root's thread makes both copies, so the out-of-place broadcast
    # is not the transfer alone either (2 ranks, µs, out of place / in place: 64 KiB 9.6 / 4.9,
    # 256 KiB 17.7 / 16.1, 1 MiB 62.7 / 54.1).
    if TAPE["mode"] != "replay" or any(key[2] == "broadcast:inplace"
                                       for key, _ in TAPE["entries"]
                                       if isinstance(key, list) and len(key) > 2):
        BROADCAST["op"] = "broadcast:inplace"
    ALGOS.append("native")
    # 2. Prediction. Paired: each run calibrates and then measures at once, its predictions
    # come from its own calibration, and a row's error is the median of the runs' errors (a
    # slow period of the machine moves both sides of one run alike). Otherwise one calibration
    # from the medians of every run predicts the medians of every run.
    runs_data = []  # per run: (model, {ranks: (meas, spread)})
    if a.paired:
        for r in range(a.runs):
            print("# run %d of %d" % (r + 1, a.runs))
            # Each rank count calibrated and then measured at once (the 2-rank part first: it
            # finds the protocol step both use).
            parts, meas = [], {}
            for ranks in (2, 4):
                parts.append(calibrate(a, cores, 1, ranks))
                meas[ranks] = measure(a, ranks, 1)
            runs_data.append((merged(parts), meas))
    else:
        model = merged([calibrate(a, cores, a.runs, ranks) for ranks in (2, 4)])
        runs_data.append((model, {ranks: measure(a, ranks, a.runs) for ranks in (2, 4)}))
    if TAPE["mode"] != "replay":
        print("# launches passed over because the OS crowded the ranks onto fewer CPUs "
              "(loom bench's Placement line): %d; commands whose every launch was: %d"
              % (CROWDED["launches"], CROWDED["kept"]))
    if TAPE["mode"] == "record":
        tmp = a.record + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"transport": a.transport, "cores": cores, "cache": CACHE["bytes"],
                       "inline": NATIVE["inline"], "fragment": FRAGMENT["bytes"],
                       "schedule": SCHEDULE["version"],
                       "argv": sys.argv[1:],
                       "measurements": TAPE["entries"]}, f)
        os.replace(tmp, a.record)
        print("# recorded %d measurements in %s" % (len(TAPE["entries"]), a.record))
    elif TAPE["mode"] == "replay" and TAPE["regroup"] is not None:
        print("# replayed %d of the file's %d measurements, pooled per measurement across its "
              "paired runs" % (TAPE["at"], len(TAPE["entries"])))
    elif TAPE["mode"] == "replay" and TAPE["at"] != len(TAPE["entries"]):
        sys.exit("calibrate_host: this run used %d of the replayed file's %d measurements "
                 "(recorded with other options?)" % (TAPE["at"], len(TAPE["entries"])))
    # Paired runs also give the *fastest* view: each primitive and each row the fastest of its
    # runs (the machine at its fastest on both sides, as --stat min takes a row's fastest round
    # and --launches its fastest launch): one calibration from those against those rows.
    fastest = None
    if a.paired and a.runs > 1:
        print("# the fastest of the %d runs: each measurement the fastest of its runs" % a.runs)
        saved = dict(TAPE)
        TAPE.update(mode="replay", at=0, regroup=regrouped(saved["entries"]))
        ACROSS["pick"] = "min"
        model = merged([calibrate(a, cores, a.runs, ranks) for ranks in (2, 4)])
        fastest = (model, {ranks: measure(a, ranks, a.runs) for ranks in (2, 4)})
        ACROSS["pick"] = a.across
        TAPE.clear()
        TAPE.update(saved)
    within = total = steady = steady_within = 0
    crossover_ok = crossover_total = 0
    schedules_ok = schedules_total = 0
    # Paired runs also give one pooled model (each parameter the median of the runs') against
    # the median measurement: a run whose calibration and measurement fell in different speeds
    # of the machine then moves the model by no more than any other run.
    pooled = pooled_model([model for model, _ in runs_data]) if a.paired else None
    pooled_within = pooled_crossover_ok = 0
    fastest_within = fastest_crossover_ok = 0
    curves = {}
    print("# %5s %10s %11s %12s %12s %8s %8s %8s   %s"
          % ("ranks", "algorithm", "size", "measured_us", "simulated_us", "error",
             "pooled" if pooled else "", "fastest" if fastest else "", "runs (us)"))
    for ranks in (2, 4):
        per_run = [(runs[ranks][0], predict(model, cores, ranks,
                                            sorted({s for (_, s) in runs[ranks][0]})))
                   for model, runs in runs_data]
        meas = {k: statistics.median(m[k] for m, _ in per_run) for k in per_run[0][0]}
        pred = {k: statistics.median(q[k] for _, q in per_run) for k in per_run[0][0]}
        errs = {k: statistics.median(q[k] / m[k] - 1 for m, q in per_run) for k in meas}
        if a.paired:
            spread = {k: (min(m[k] for m, _ in per_run), max(m[k] for m, _ in per_run))
                      for k in meas}
        else:
            spread = runs_data[0][1][ranks][1]
        sizes = sorted({s for (_, s) in meas})
        pooled_pred = predict(pooled, cores, ranks, sizes) if pooled else None
        if fastest:
            fast_meas = fastest[1][ranks][0]
            fast_pred = predict(fastest[0], cores, ranks, sizes)
        for algo in ALGOS:
            for s in sizes:
                err = errs[(algo, s)]
                pooled_err = pooled_pred[(algo, s)] / meas[(algo, s)] - 1 if pooled else None
                pooled_within += pooled is not None and abs(pooled_err) <= 0.25
                fast_err = fast_pred[(algo, s)] / fast_meas[(algo, s)] - 1 if fastest else None
                fastest_within += fastest is not None and abs(fast_err) <= 0.25
                lo, hi = spread[(algo, s)]
                # The measurement's own run-to-run range: wider than the +-25 % band (slowest
                # run over 1.5 x the fastest) says the machine, not the model, sets the error.
                noisy = hi > 1.5 * lo
                total += 1
                within += abs(err) <= 0.25
                steady += not noisy
                steady_within += not noisy and abs(err) <= 0.25
                print("  %5d %10s %11d %12.1f %12.1f %+7.1f%% %8s %8s   %9.1f-%-9.1f%s"
                      % (ranks, algo, s, meas[(algo, s)], pred[(algo, s)], 100 * err,
                         "%+.1f%%" % (100 * pooled_err) if pooled else "",
                         "%+.1f%%" % (100 * fast_err) if fastest else "", lo, hi,
                         " noisy" if noisy else ""))
            factor = 2 * (ranks - 1) / ranks
            curves["%s %d ranks measured" % (algo, ranks)] = [
                s / meas[(algo, s)] / 1e3 * factor for s in sizes]
            curves["%s %d ranks simulated" % (algo, ranks)] = [
                s / pred[(algo, s)] / 1e3 * factor for s in sizes]
        # The fastest algorithm per size: predicted right, or right one size step away.
        best_m = [min(ALGOS, key=lambda al: meas[(al, s)]) for s in sizes]
        best_p = [min(ALGOS, key=lambda al: pred[(al, s)]) for s in sizes]
        best_q = [min(ALGOS, key=lambda al: pooled_pred[(al, s)]) for s in sizes] if pooled \
            else best_p

        def crossover(best, i, s, fastest=best_m, measured=meas):
            near = {best[j] for j in range(max(0, i - 1), min(len(sizes), i + 2))}
            return (fastest[i] in near or
                    measured[(best[i], s)] <= 1.1 * measured[(fastest[i], s)])

        if ALGOS != SCHEDULES:
            # The same among Loom's schedules alone (what auto weighs where native is off).
            sched_m = [min(SCHEDULES, key=lambda al: meas[(al, s)]) for s in sizes]
            sched_p = [min(SCHEDULES, key=lambda al: pred[(al, s)]) for s in sizes]
            for i, s in enumerate(sizes):
                schedules_total += 1
                schedules_ok += crossover(sched_p, i, s, sched_m)

        fast_ok = []
        if fastest:
            fast_m = [min(ALGOS, key=lambda al: fast_meas[(al, s)]) for s in sizes]
            fast_p = [min(ALGOS, key=lambda al: fast_pred[(al, s)]) for s in sizes]
            fast_ok = [crossover(fast_p, i, s, fast_m, fast_meas) for i, s in enumerate(sizes)]
            fastest_crossover_ok += sum(fast_ok)

        for i, s in enumerate(sizes):
            crossover_total += 1
            ok, pooled_ok = crossover(best_p, i, s), crossover(best_q, i, s)
            crossover_ok += ok
            pooled_crossover_ok += pooled_ok
            print("# %d ranks, %9d B: fastest measured %-10s predicted %-10s %s%s%s"
                  % (ranks, s, best_m[i], best_p[i], "ok" if ok else "MISSED",
                     "; pooled %s %s" % (best_q[i], "ok" if pooled_ok else "MISSED")
                     if pooled else "",
                     "; fastest view: measured %s predicted %s %s"
                     % (fast_m[i], fast_p[i], "ok" if fast_ok[i] else "MISSED")
                     if fast_ok else ""))
        curves.setdefault("_sizes", sizes)
    print("# within +-25%%: %d of %d (of the %d rows whose runs agree within 1.5x: %d); fastest "
          "algorithm right (or one size step, or within 10%% of the fastest): %d of %d"
          % (within, total, steady, steady_within, crossover_ok, crossover_total))
    if schedules_total:
        print("# fastest of Loom's schedules alone (%s): %d of %d"
              % (", ".join(SCHEDULES), schedules_ok, schedules_total))
    if pooled:
        print("# pooled (each parameter the median of the runs', against the median "
              "measurement): within +-25%%: %d of %d; fastest algorithm: %d of %d"
              % (pooled_within, total, pooled_crossover_ok, crossover_total))
    if fastest:
        print("# fastest (each primitive and each row the fastest of its %d runs): within +-25%%: "
              "%d of %d; fastest algorithm: %d of %d"
              % (a.runs, fastest_within, total, fastest_crossover_ok, crossover_total))
    if a.plot:
        plt = sim._pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
        sizes = curves.pop("_sizes")
        for ax, ranks in zip(axes, (2, 4)):
            for algo in ALGOS:
                line, = ax.plot(sizes, curves["%s %d ranks measured" % (algo, ranks)], marker="o",
                                markersize=3, label="%s measured" % algo)
                ax.plot(sizes, curves["%s %d ranks simulated" % (algo, ranks)], linestyle="--",
                        color=line.get_color(), label="%s simulated" % algo)
            ax.set_xscale("log", base=2)
            ax.set_title("%s, %d ranks" % (a.transport, ranks))
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("busbw (GB/s)")
            ax.grid(True, alpha=0.3)
        axes[1].legend(fontsize=7)
        sim._save(fig, a.plot)
        print("# wrote %s" % a.plot)


if __name__ == "__main__":
    main()
