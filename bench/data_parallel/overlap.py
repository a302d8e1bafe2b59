"""Reads a `loom run --timeline` JSON and prints, per rank, compute and communication time and
how much of the communication ran while the same rank was computing (overlap).

    build/tools/loom run OUT --iters 50 --timeline /tmp/t.json
    python3 bench/data_parallel/overlap.py /tmp/t.json
"""
import json
import sys


def merged(intervals):
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def overlap(a, b):
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def main(path):
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    print("| rank | compute (ms) | communication (ms) | communication overlapped with compute |")
    print("|---|---|---|---|")
    for rank in sorted({e["pid"] for e in events}):
        comp = merged([(e["ts"], e["ts"] + e["dur"]) for e in events
                       if e["pid"] == rank and e["tid"] == 0])
        comm = merged([(e["ts"], e["ts"] + e["dur"]) for e in events
                       if e["pid"] == rank and e["tid"] == 1])
        tc = sum(e - b for b, e in comp)
        tm = sum(e - b for b, e in comm)
        ov = overlap(comp, comm)
        print("| %d | %.2f | %.2f | %.0f%% |" % (rank, tc / 1e3, tm / 1e3,
                                                 100.0 * ov / tm if tm else 0.0))


if __name__ == "__main__":
    main(sys.argv[1])
