"""Plots test accuracy against wall time per mode from the JSON lines of
examples/kvstore_train.py --log, and prints the table of time per epoch and final accuracy.

    python3 bench/kvstore/plot_modes.py LOG OUT.png
"""
import json
import sys
from collections import OrderedDict


def main():
    log, out = sys.argv[1], sys.argv[2]
    runs = OrderedDict()
    with open(log) as f:
        for line in f:
            r = json.loads(line)
            runs.setdefault(r["mode"], []).append(r)
    print("%-10s %14s %10s" % ("mode", "s per epoch", "accuracy"))
    for mode, rs in runs.items():
        print("%-10s %14.2f %10.4f" % (mode, rs[-1]["seconds"] / rs[-1]["epoch"], rs[-1]["accuracy"]))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, rs in runs.items():
        ax.plot([r["seconds"] for r in rs], [r["accuracy"] for r in rs], marker="o", label=mode)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_xlim(left=0)
    ax.set_title("Fashion-MNIST MLP, 4 workers, 2 servers (2-core VM)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print("wrote", out)


if __name__ == "__main__":
    main()
