#!/usr/bin/python3
"""How close `auto` comes to the best fixed allreduce algorithm at each (size, in-flight) point.

Runs `loom bench collective --algo ring,tree,multi_tree,star,direct,native,auto --rounds ROUNDS`
per in-flight sweep: at each size every algorithm is timed ROUNDS times round-robin (so that a
burst of load from other processes falls on all of them alike) and each reports its median
round. Prints a Markdown table: the median time of each algorithm, what auto ran, and auto's
time over the best fixed algorithm's. With --mpi (4 processes under mpirun) Open MPI's blocking
MPI_Allreduce on the same buffers joins the round-robin (`--peer-mpi`) and the table adds auto's
time over it.

    /usr/bin/python3 bench/collective/auto_check.py [--rounds 5] [--places 4] [--mpi]
"""
import argparse
import os
import statistics
import subprocess
import sys

ALGOS = ["ring", "tree", "multi_tree", "star", "direct", "native"]


def run_once(loom, places, inflight, minb, maxb, iters, rounds, extra, mpi=False):
    # Over MPI: the plain MPI path, whose crossovers the selector holds (on one node Loom's
    # default, the shared-memory meeting, runs native at every size).
    where = (["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "LOOM_MPI_SHM=0", "-np",
              str(places), loom,
              "bench", "collective", "--transport", "mpi", "--peer-mpi"] if mpi else
             [loom, "bench", "collective", "--places", "cpu:%d" % places])
    cmd = where + ["--algo",
           ",".join(ALGOS + ["auto"]), "-b", minb, "-e", maxb, "-f", "4", "-n", str(iters),
           "-w", "2", "--inflight", str(inflight), "--rounds", str(rounds)] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 9 or line.startswith("#") or not parts[0].isdigit():
            continue
        size, algo, us, wrong = int(parts[0]), parts[4], float(parts[5]), int(parts[8])
        if wrong:
            sys.exit("%s at %d bytes: %d wrong elements" % (algo, size, wrong))
        choice = None
        if algo.startswith("auto:"):
            algo, choice = "auto", algo.split(":", 1)[1]
        rows[(size, algo)] = (us, choice)
    return rows


def human(size):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= div:
            return "%d %s" % (size // div, unit)
    return "%d B" % size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--places", type=int, default=4)
    ap.add_argument("--mpi", action="store_true",
                    help="ranks are processes under mpirun (MPI transport), not in-process places")
    ap.add_argument("--loom", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                   "tools", "loom"))
    ap.add_argument("--points", default="1:4K:256K:200,1:1M:64M:10,50:4K:1M:3,150:4K:256K:2",
                    help="comma-separated INFLIGHT:MIN:MAX:ITERS sweeps (one call in flight: "
                         "200 timed calls up to 256 KiB, where 10 would be all noise)")
    ap.add_argument("extra", nargs="*", help="more flags for loom bench collective (after --)")
    args = ap.parse_args()
    table = {}
    for point in args.points.split(","):
        inflight, minb, maxb, iters = point.split(":")
        for (size, algo), val in run_once(args.loom, args.places, int(inflight), minb, maxb,
                                          int(iters), args.rounds, args.extra,
                                          args.mpi).items():
            table[(int(inflight), size, algo)] = val
    peer = ["MPI_Allreduce"] if args.mpi else []
    print("| in flight | size | " + " | ".join(ALGOS + peer) + " | auto | auto ran | auto / best |"
          + (" auto / MPI_Allreduce |" if args.mpi else ""))
    print("|---" * (len(ALGOS) + len(peer) + 5 + len(peer)) + "|")
    worst = worst_mpi = 0.0
    for inflight, size in sorted({(k[0], k[1]) for k in table}):
        times = [table[(inflight, size, a)][0] for a in ALGOS]
        auto, choice = table[(inflight, size, "auto")]
        best = min(times)
        worst = max(worst, auto / best)
        row = "| %d | %s | %s | " % (inflight, human(size), " | ".join("%.1f" % t for t in times))
        if args.mpi:
            mpi = table[(inflight, size, "MPI_Allreduce")][0]
            worst_mpi = max(worst_mpi, auto / mpi)
            row += "%.1f | " % mpi
        row += "%.1f | %s | %.2f |" % (auto, choice, auto / best)
        if args.mpi:
            row += " %.2f |" % (auto / mpi)
        print(row)
    print()
    print("(median µs per call over %d round-robin rounds, %d %s; worst auto / best: %.2f%s)"
          % (args.rounds, args.places, "MPI processes" if args.mpi else "in-process places",
             worst, "; worst auto / MPI_Allreduce: %.2f" % worst_mpi if args.mpi else ""))


if __name__ == "__main__":
    main()
