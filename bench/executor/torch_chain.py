#!/usr/bin/python3
"""PyTorch eager peer of executor_bench: N chained `x * s` ops on a 1-element tensor."""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.ones(1)
    with torch.no_grad():
        for _ in range(20):  # warm up
            y = x
            for _ in range(args.ops):
                y = y * 1.0001
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            y = x
            for _ in range(args.ops):
                y = y * 1.0001
            best = min(best, time.perf_counter() - t0)
    print(json.dumps({"peer": "pytorch-eager", "torch": torch.__version__,
                      "ns_per_op": best / args.ops * 1e9}))


if __name__ == "__main__":
    main()
