#!/usr/bin/python3
"""Checks the simulator against this machine (docs/SIMULATOR.md, "Against this machine").

1. Calibration: three one-message primitives measured with `loom bench collective` on 2 ranks
   (a 4-byte broadcast, a 64 MiB broadcast, a 64 MiB reduce, tree schedule: one transfer per
   pipeline piece) give the host model's latency, copy and reduce bandwidths, each fitted so
   that the simulator replays that primitive in the measured time (bisection on the
   simulator itself). The core count is the machine's.
2. Prediction: allreduce with ring, tree, star and multi_tree on 2 and 4 ranks, 4 KiB-64 MiB,
   measured (median of --runs runs) and simulated on `host:N:cores=C:copy=..:reduce=..:latency=..`
   side by side, with the error, the share within +-25 %, and the fastest algorithm per size
   measured vs predicted (a crossover predicted within one size step counts as met).

    PYTHONPATH=build/python bench/sim/calibrate_host.py --transport inprocess [--plot out.png]
    PYTHONPATH=build/python bench/sim/calibrate_host.py --transport mpi

Nothing here is asserted in a test: timings on a shared 2-core VM are a benchmark.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

import loom.sim as sim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALGOS = ["ring", "tree", "star", "multi_tree"]
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+(\S+)\s+([0-9.]+)")


ROUNDS = {"rounds": 5}


def bench(loom, transport, ranks, op, algos, lo, hi, iters, warmup, chunk=None):
    # Rows of one size run round-robin, ROUNDS times, each reported as its median: what is
    # compared is timed side by side.
    cmd = [loom, "bench", "collective", "--op", op, "--algo", ",".join(algos), "-b", str(lo),
           "-e", str(hi), "-f", "4", "-n", str(iters), "-w", str(warmup),
           "--rounds", str(ROUNDS["rounds"])]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    if transport == "mpi":
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--allow-run-as-root"] + cmd
    else:
        cmd += ["--places", "cpu:%d" % ranks]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit("calibrate_host: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    times = {}
    for line in out.stdout.splitlines():
        m = ROW.match(line)
        if m:
            times[(m.group(3), int(m.group(1)))] = float(m.group(4))
    return times


def median_bench(runs, *args):
    samples = [bench(*args) for _ in range(runs)]
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


# What the transport runs that the host model must replay too: over MPI every call starts with
# the communicator's signature round (an all-to-all of empty, tagged messages) and pipelines in
# 256 KiB pieces; in-process calls pipeline in 1 MiB pieces (collective/transport_registry.cc).
TRANSPORT = {"mpi_exchange": False, "chunk": 1 << 20}


def simulate(ranks, cores, copy, reduce, latency, call, op, algo, size, chunk=None,
             cache=None):
    """One call on the host model. Posting is folded into the per-message latency (post_us 0).
    cache: (bytes, copy_cached, reduce_cached) or None."""
    spec = "host:%d:cores=%d:copy=%r:reduce=%r:latency=%r" % (ranks, cores, copy, reduce, latency)
    if cache:
        spec += ":cache=%d:copy_cached=%r:reduce_cached=%r" % cache
    return sim.collectives(spec, [size], op=op, algorithm=algo, call_us=call, post_us=0,
                           chunk_bytes=chunk or TRANSPORT["chunk"],
                           mpi_exchange=TRANSPORT["mpi_exchange"])[0]["time_us"]


def llc_bytes():
    """The last-level cache's size (sysfs), or 32 MiB."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in (os.listdir(base) if os.path.isdir(base) else []):
        try:
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
            value = int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]]
            best = max(best, value)
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return best or 32 << 20


def bisect(f, target, lo, hi, increasing):
    """x in [lo, hi] with f(x) = target for a monotone f (geometric steps)."""
    for _ in range(60):
        mid = (lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transport", choices=["inprocess", "mpi"], default="inprocess")
    p.add_argument("--loom", default=os.path.join(ROOT, "build", "tools", "loom"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5,
                   help="round-robin rounds within each run (loom bench --rounds)")
    p.add_argument("--plot", help="write predicted vs measured busbw curves to this PNG")
    a = p.parse_args()
    cores = os.cpu_count() or 1
    ROUNDS["rounds"] = a.rounds
    if a.transport == "mpi":
        TRANSPORT.update(mpi_exchange=True, chunk=256 << 10)
    big = 64 << 20

    # 1. Calibration. The per-message latency is a waiting thread's (or process's) wake-up: on
    # 4 ranks, a 4-byte broadcast along the ring's chain (3 dependent messages) against one
    # down the tree (2) gives it, and what the tree leaves over is the per-call cost. On 2 ranks
    # every schedule is one message, so the latency is taken as 4 ranks' scaled by the ranks
    # per core (2 / 4) and the call cost is what a 4-byte broadcast leaves over.
    # On 2 ranks: a 64 MiB broadcast (one copy per piece) and reduce give the copy and reduce
    # bandwidths from memory, 1 MiB ones the bandwidths within the last-level cache.
    timing = {}
    small4 = median_bench(a.runs, a.loom, a.transport, 4, "broadcast", ["tree", "ring"], 4, 4,
                          2000, 200)
    tree4, chain4 = small4[("tree", 4)], small4[("ring", 4)]
    latency4 = bisect(lambda x: simulate(4, cores, 10, 10, x, 0, "broadcast", "ring", 4) -
                      simulate(4, cores, 10, 10, x, 0, "broadcast", "tree", 4),
                      max(chain4 - tree4, 0.0), 0.0, 10000.0, increasing=True)
    call4 = max(0.0, tree4 - simulate(4, cores, 10, 10, latency4, 0, "broadcast", "tree", 4))
    tree2 = median_bench(a.runs, a.loom, a.transport, 2, "broadcast", ["tree"], 4, 4, 2000,
                         200)[("tree", 4)]
    latency2 = latency4 * 2 / 4
    call2 = max(0.0, tree2 - simulate(2, cores, 10, 10, latency2, 0, "broadcast", "tree", 4))
    timing = {2: (latency2, call2), 4: (latency4, call4)}
    print("# calibration, 4 ranks: 4-byte broadcast down the tree %.1f us, along the chain %.1f"
          " us -> latency %.2f us per message, call %.2f us" % (tree4, chain4, latency4, call4))
    print("# calibration, 2 ranks: 4-byte broadcast %.1f us -> latency %.2f us (scaled), call "
          "%.2f us" % (tree2, latency2, call2))
    latency2, call2 = timing[2]
    bw = {}
    for size in (big, 1 << 20):
        iters = 10 if size == big else 200
        cp = median_bench(a.runs, a.loom, a.transport, 2, "broadcast", ["tree"], size, size,
                          iters, 2)[("tree", size)]
        rd = median_bench(a.runs, a.loom, a.transport, 2, "reduce", ["tree"], size, size, iters,
                          2)[("tree", size)]
        copy = bisect(lambda g: simulate(2, cores, g, 10, latency2, call2, "broadcast", "tree",
                                         size), cp, 0.01, 1000.0, increasing=False)
        reduce = bisect(lambda g: simulate(2, cores, copy, g, latency2, call2, "reduce", "tree",
                                           size), rd, 0.01, 1000.0, increasing=False)
        bw[size] = (copy, reduce)
        print("# calibration, 2 ranks, %d B: broadcast %.0f us, reduce %.0f us -> copy %.2f GB/s,"
              " reduce %.2f GB/s" % (size, cp, rd, copy, reduce))
    copy, reduce = bw[big]
    cache = (llc_bytes(), bw[1 << 20][0], bw[1 << 20][1])
    print("# host model (%s, %d cores): host:N:cores=%d:copy=%.2f:reduce=%.2f:latency=L"
          ":cache=%d:copy_cached=%.2f:reduce_cached=%.2f with L and the call cost per rank count"
          % (a.transport, cores, cores, copy, reduce, cache[0], cache[1], cache[2]))

    # 2. Prediction.
    within = total = 0
    crossover_ok = crossover_total = 0
    curves = {}
    print("# %5s %10s %11s %12s %12s %8s" % ("ranks", "algorithm", "size", "measured_us",
                                             "simulated_us", "error"))
    for ranks in (2, 4):
        # Small calls many times (they take microseconds), large ones a few.
        meas = median_bench(a.runs, a.loom, a.transport, ranks, "allreduce", ALGOS, 4096,
                            256 << 10, 300, 30)
        meas.update(median_bench(a.runs, a.loom, a.transport, ranks, "allreduce", ALGOS, 1 << 20,
                                 big, 10, 2))
        sizes = sorted({s for (_, s) in meas})
        pred = {}
        for algo in ALGOS:
            for s in sizes:
                pred[(algo, s)] = simulate(ranks, cores, copy, reduce, timing[ranks][0],
                                           timing[ranks][1], "allreduce", algo, s, cache=cache)
                err = pred[(algo, s)] / meas[(algo, s)] - 1
                total += 1
                within += abs(err) <= 0.25
                print("  %5d %10s %11d %12.1f %12.1f %+7.1f%%" % (ranks, algo, s, meas[(algo, s)],
                                                                 pred[(algo, s)], 100 * err))
            factor = 2 * (ranks - 1) / ranks
            curves["%s %d ranks measured" % (algo, ranks)] = [
                s / meas[(algo, s)] / 1e3 * factor for s in sizes]
            curves["%s %d ranks simulated" % (algo, ranks)] = [
                s / pred[(algo, s)] / 1e3 * factor for s in sizes]
        # The fastest algorithm per size: predicted right, or right one size step away.
        best_m = [min(ALGOS, key=lambda al: meas[(al, s)]) for s in sizes]
        best_p = [min(ALGOS, key=lambda al: pred[(al, s)]) for s in sizes]
        for i, s in enumerate(sizes):
            crossover_total += 1
            near = {best_p[j] for j in range(max(0, i - 1), min(len(sizes), i + 2))}
            ok = best_m[i] in near or meas[(best_p[i], s)] <= 1.1 * meas[(best_m[i], s)]
            crossover_ok += ok
            print("# %d ranks, %9d B: fastest measured %-10s predicted %-10s %s"
                  % (ranks, s, best_m[i], best_p[i], "ok" if ok else "MISSED"))
        curves.setdefault("_sizes", sizes)
    print("# within +-25%%: %d of %d; fastest algorithm right (or one size step, or within 10%%"
          " of the fastest): %d of %d" % (within, total, crossover_ok, crossover_total))
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
