"""The simulator from Python: Loom's collective schedules replayed over a model of a machine's
links, and training steps at scale (the same engine as ``loom simulate``; docs/SIMULATOR.md).

    import loom.sim as sim
    rows = sim.collectives("nd-a100-v4", sizes=sim.sweep(1 << 20, 1 << 30), algorithm="nccl")
    sim.plot_busbw({"nccl": rows}, "busbw.png")
    steps = sim.scaling("16x8:dgx1-v100:4x100Gb", "resnet50", [1, 8, 32, 128])
    sim.plot_scaling({"resnet50": steps}, "scaling.png")

Machines are presets (``machines()``), topology files, or cluster specs
``NODESxGPUS:NODE:NICSxSPEED[:oversub=K][:servers=S[xSPEED]]``. Results are lists of dicts, one per size or device
count, with the columns ``loom simulate`` prints.
"""
import json
import os
import sys

from . import core

__all__ = ["auto_cost_model", "collectives", "scaling", "sweep", "machines", "models", "algorithms",
           "plot_busbw", "plot_scaling", "plot_json", "main"]


def auto_cost_model():
    """What ``auto`` asks in this process: "sim" (the simulator, the default) or "formulas"
    (the selector's alpha-beta formulas, with ``LOOM_AUTO_COST_MODEL=formulas`` set before
    Loom is imported)."""
    return core.auto_cost_model()


def machines():
    """The machine presets (NVSwitch boxes and topology presets)."""
    return list(core.sim_machines())


def models():
    """The built-in models for ``scaling`` (their gradient lists come from the architectures)."""
    return list(core.sim_models())


def algorithms():
    """The algorithm names ``collectives`` and ``scaling`` take."""
    return list(core.sim_algorithms())


def sweep(min_bytes, max_bytes, factor=2):
    """Sizes from min_bytes to max_bytes, each ``factor`` times the last (nccl-tests' -b -e -f)."""
    if min_bytes < 1 or max_bytes < min_bytes or factor <= 1:
        raise ValueError("sweep(%r, %r, %r): need 1 <= min <= max and factor > 1"
                         % (min_bytes, max_bytes, factor))
    sizes, s = [], float(min_bytes)
    while s <= max_bytes * (1 + 1e-12):
        sizes.append(int(round(s)))
        s *= factor
    return sizes


def collectives(machine, sizes, op="allreduce", algorithm="auto", root=0, chunk_bytes=1 << 20,
                post_us=1.0, reduce_gbps=0.0, efficiency=1.0, call_us=0.0, mpi_exchange=False,
                root_copy_first=False, in_place=False):
    """Simulates one call of ``op`` per size (bytes; nccl-tests' size) on ``machine``.

    Returns dicts with bytes, algorithm, time_us, algbw_gbps, busbw_gbps, bottleneck,
    bottleneck_utilization and transfers. ``post_us``: software cost per posted message;
    ``call_us``: per call before its first message; ``algorithm``: ring, tree, multi_tree, star,
    direct, exchange, split_exchange, native (a host spec with ``native=pass``: the in-process
    transport's one pass over shared memory; ``native=libnbc``: Open MPI's MPI_Iallreduce),
    channels, rails (clusters: every NIC), hierarchical, auto, nccl_ring, nccl_tree or nccl.
    ``mpi_exchange``: the ranks are processes under Loom's MPI communicator (every schedule first
    pays its signature round; auto runs the small allreduces inside that round, as
    ``exchange`` or ``split_exchange``, like ``loom simulate --mpi-exchange``). Errors (unknown
    machine or algorithm, a size that is not whole float32 elements) raise ValueError naming
    them; an exchange asked for outside its sizes, or native on a machine without it,
    raises NotImplementedError. ``root_copy_first``: the rooted broadcasts (tree, star, ring's
    chain, multi_tree) as Loom ran them before they sent from the root's send buffer (the root
    first copied send into recv and sent from there), to replay measurements of that schedule.
    ``in_place``: Loom's schedules with one buffer for send and receive (allreduce, reduce and
    broadcast only; a broadcast's root then copies nothing).
    """
    return list(core.sim_collectives(machine, op, algorithm, [int(s) for s in sizes], root,
                                     chunk_bytes, post_us, reduce_gbps, efficiency, call_us,
                                     mpi_exchange, bool(root_copy_first), bool(in_place)))


def scaling(machine, model, scale, algorithm="auto", fusion_mb=32.0, chunk_bytes=1 << 20,
            post_us=1.0, reduce_gbps=0.0, efficiency=1.0, call_us=0.0, mpi_exchange=False):
    """Simulates one training step of ``model`` (resnet50, vgg16, bert-large or a JSON file) on
    each device count of ``scale`` (fewer than a node: its first devices; more: whole nodes of
    ``machine``'s kind). Returns dicts with devices, nodes, buckets, compute_us, comm_us,
    exposed_us, step_us, samples_per_s, efficiency and algorithms. ``mpi_exchange`` as for
    collectives."""
    return list(core.sim_scaling(machine, model, [int(n) for n in scale], algorithm, fusion_mb,
                                 chunk_bytes, post_us, reduce_gbps, efficiency, call_us,
                                 mpi_exchange))


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - Debian's python3-matplotlib is a dependency
        raise ImportError("plots need matplotlib (Debian: apt-get install python3-matplotlib)") from e
    return plt


def _save(fig, path):
    tmp = "%s.tmp%d.png" % (path, os.getpid())
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)  # atomic: an earlier plot survives a failed one


def _plot(series, path, title, x, y, xlabel, ylabel, ylim=None):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in series.items():
        ax.plot([x(r) for r in rows], [y(r) for r in rows], marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    _save(fig, path)
    plt.close(fig)


def plot_busbw(series, path, title=None):
    """Bus bandwidth against size, one line per entry of ``series`` (name -> collectives()
    rows), written to ``path`` (PNG)."""
    _plot(series, path, title, lambda r: r["bytes"], lambda r: r["busbw_gbps"], "size (bytes)",
          "busbw (GB/s)")


def plot_scaling(series, path, title=None):
    """Weak-scaling efficiency against device count, one line per entry of ``series``
    (name -> scaling() rows), written to ``path`` (PNG)."""
    _plot(series, path, title, lambda r: r["devices"], lambda r: 100 * r["efficiency"],
          "devices", "scaling efficiency (%)", ylim=(0, 105))


def plot_json(data_path, path):
    """Draws what ``loom simulate --plot`` wrote to ``data_path`` (JSON: ``kind`` "busbw" or
    "scaling", ``title``, ``series``: a list of ``{"name", "points": [[x, y], ...]}``) into
    ``path`` (PNG)."""
    with open(data_path) as f:
        data = json.load(f)
    kind = data.get("kind")
    if kind not in ("busbw", "scaling"):
        raise ValueError("%s: kind %r is neither 'busbw' nor 'scaling'" % (data_path, kind))
    series = {s["name"]: s["points"] for s in data["series"]}
    if kind == "busbw":
        _plot(series, path, data.get("title"), lambda p: p[0], lambda p: p[1], "size (bytes)",
              "busbw (GB/s)")
    else:
        _plot(series, path, data.get("title"), lambda p: p[0], lambda p: p[1], "devices",
              "scaling efficiency (%)", ylim=(0, 105))


def main(argv=None):
    """``python3 -m loom.sim busbw MACHINE ALGO[,ALGO] OUT.png [MIN MAX]``,
    ``python3 -m loom.sim scaling MACHINE MODEL[,MODEL] OUT.png N,N,... [ALGO]`` or
    ``python3 -m loom.sim plot-json DATA.json OUT.png`` (what ``loom simulate --plot`` runs):
    the plots ``loom simulate`` cannot draw itself."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: python3 -m loom.sim busbw MACHINE ALGO[,ALGO...] OUT.png [MIN MAX]\n"
             "       python3 -m loom.sim scaling MACHINE MODEL[,MODEL...] OUT.png N,N,... [ALGO]\n"
             "       python3 -m loom.sim plot-json DATA.json OUT.png\n")
    if args[:1] == ["plot-json"] and len(args) == 3:
        try:
            plot_json(args[1], args[2])
        except (ValueError, LookupError, OSError, TypeError) as e:
            sys.stderr.write("loom.sim: error: %s\n" % e)
            return 1
        return 0
    if len(args) < 4 or args[0] not in ("busbw", "scaling"):
        sys.stderr.write(usage)
        return 2
    try:
        if args[0] == "busbw":
            lo, hi = (int(args[4]), int(args[5])) if len(args) >= 6 else (1 << 10, 1 << 30)
            series = {a: collectives(args[1], sweep(lo, hi), algorithm=a)
                      for a in args[2].split(",")}
            plot_busbw(series, args[3], title="allreduce on %s" % args[1])
        else:
            if len(args) < 5:
                sys.stderr.write(usage)
                return 2
            scale = [int(n) for n in args[4].split(",")]
            algo = args[5] if len(args) > 5 else "auto"
            series = {m: scaling(args[1], m, scale, algorithm=algo) for m in args[2].split(",")}
            plot_scaling(series, args[3], title="%s, %s" % (args[1], algo))
    except (ValueError, LookupError, OSError) as e:
        sys.stderr.write("loom.sim: error: %s\n" % e)
        return 1
    print("wrote %s" % args[3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
