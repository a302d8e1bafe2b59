"""Data-parallel training with Fluid's names: ``CompiledProgram(main).with_data_parallel(...)``
run by the one ``Executor``, ``BuildStrategy`` and the thin ``ParallelExecutor`` alias.

The program is transpiled (in C++, ``loom transpile``'s passes) into one program per place; the
places run concurrently, each on its own thread with its own scope, and exchange gradients with
collective ops that overlap with backward. Rank 0 runs in the caller's scope, so parameters
saved from it (``io.save_params``) are the trained ones; the other ranks get copies of the
caller's initialized persistables on the first run. With ``BuildStrategy.transport = "mpi"`` the
ranks are processes started by mpirun instead (one place each, Horovod-style).
"""
import itertools

import numpy as np

from . import core, profiler
from ._mpi import mpi_cleanup
from .executor import Executor, _fetch_name
from .framework import (Program, Variable, _check_place_count, cpu_places, cuda_places,
                        default_main_program)
from .scope import global_scope

_group_ids = itertools.count()


class BuildStrategy:
    """How the data-parallel program is built.

    reduce_strategy: ``ReduceStrategy.AllReduce`` (every place updates every parameter after an
    allreduce of its gradient) or ``ReduceStrategy.Reduce`` (root-card ownership: each parameter
    has one owner place, which alone runs its optimizer ops and broadcasts the result).
    gradient_scale_strategy: ``None`` (default: each place weighted by its share of the batch, so
    the update equals the full-batch update even when the batch does not divide evenly),
    ``CoeffNumDevice`` (1/N), ``One`` or ``Customized`` (plain sum).
    fuse_all_reduce_ops / fuse_grad_size_in_MB: group small gradients into buckets that are
    produced in one buffer and allreduced with one call.
    allreduce_algorithm: "auto", "ring", "tree", "multi_tree", "star", "direct" or "native" (Loom's
    addition; "native" is the transport's own: on CPU places one pass over shared memory, with
    transport "mpi" Open MPI's allreduce, on CUDA places NCCL's; "auto" picks per bucket).
    owner_policy: "bytes" (balanced) or "hash" for ReduceStrategy.Reduce (Loom's addition).
    gradient_compression: None (default) or "fp16" (Loom's addition, Horovod's fp16
    compression): float32 gradients cross between the places as float16, half the bytes; each
    hop adds in float32 and rounds to float16. AllReduce strategy, CPU places.
    transport: "inprocess" (default: the places are threads of this process and each global
    feed is split across them) or "mpi" (Loom's addition, Horovod-style: one process per rank,
    started by ``mpirun -np N python3 train.py``; each process runs one place, feeds its own
    batch, and gets its own fetched values; the update equals the full-batch update over the
    samples of all processes). MPI is finalized when Python exits. With CUDA places the ranks
    are threads with one GPU each, meeting over NCCL (NCCL's own collectives); transport
    "cuda_p2p" (Loom's addition) runs Loom's ring/tree/multi_tree/star schedules on the GPUs
    instead (peer copies and reduction kernels; the trees follow the GPUs' links).
    sync_batch_norm: False (default) or True: the training-mode batch_norm ops of the main
    block normalize with the statistics of the whole batch over all places (sync_batch_norm
    ops, which allreduce them), so the forward pass and the gradients are those of one
    batch_norm over the global batch. CPU places.
    """

    class ReduceStrategy:
        AllReduce = 0
        Reduce = 1

    class GradientScaleStrategy:
        CoeffNumDevice = 0
        One = 1
        Customized = 2

    def __init__(self):
        self.reduce_strategy = BuildStrategy.ReduceStrategy.AllReduce
        self.gradient_scale_strategy = None
        self.fuse_all_reduce_ops = True
        self.fuse_grad_size_in_MB = 32
        self.allreduce_algorithm = "auto"
        self.owner_policy = "bytes"
        self.gradient_compression = None
        self.collective_timeout_ms = 30000
        self.transport = "inprocess"
        # Fluid's nccl2 (collective) mode: this process is trainer `trainer_id` of num_trainers,
        # each one process; they allreduce across processes (the "mpi" transport; start them
        # with `loom launch --workers N --clients 1` or mpirun -np N).
        self.num_trainers = 1
        self.trainer_id = 0
        self.sync_batch_norm = False

    def _mode(self):
        if self.reduce_strategy == BuildStrategy.ReduceStrategy.AllReduce:
            return "allreduce"
        if self.reduce_strategy == BuildStrategy.ReduceStrategy.Reduce:
            return "owner"
        raise ValueError("BuildStrategy.reduce_strategy must be ReduceStrategy.AllReduce or "
                         "ReduceStrategy.Reduce, got %r" % (self.reduce_strategy,))

    def _grad_scale(self):
        s = self.gradient_scale_strategy
        if s is None:
            return "sample"
        if s == BuildStrategy.GradientScaleStrategy.CoeffNumDevice:
            return "avg"
        if s in (BuildStrategy.GradientScaleStrategy.One,
                 BuildStrategy.GradientScaleStrategy.Customized):
            return "one"
        raise ValueError("BuildStrategy.gradient_scale_strategy %r is not one of None, "
                         "CoeffNumDevice, One, Customized" % (s,))


class ExecutionStrategy:
    """Accepted for Fluid compatibility; Loom runs one thread per place."""

    def __init__(self):
        self.num_threads = 0
        self.num_iteration_per_drop_scope = 1


# CUDA places meet over NCCL unless BuildStrategy.transport names a CUDA transport.
_CUDA_DEFAULT = "nccl"


def _transport(name):
    """The registered transport `name` (core.transports(): collective/transport_registry.h)."""
    registered = core.transports()
    for t in registered:
        if t["name"] == name:
            return t
    raise ValueError("BuildStrategy.transport: unknown transport %r (registered: %s)"
                     % (name, ", ".join(t["name"] for t in registered)))


class _RankState:
    """Per-scope state of a compiled program: the transpiled rank programs and the runner
    (runtime/runner.h) of the ranks this process runs, with their scopes."""

    def __init__(self, compiled, scope):
        bs = compiled._build_strategy
        nccl2 = getattr(compiled._program, "_nccl2", None)
        trainers = max(int(getattr(bs, "num_trainers", 1)), nccl2[0] if nccl2 else 1)
        transport_name = bs.transport
        if trainers > 1 and transport_name == "inprocess":
            transport_name = "mpi"  # trainers are processes: Fluid's nccl2 mode
        transport = _transport(transport_name)
        if transport["device"] == "cuda" and compiled._places[0].is_cpu_place():
            raise ValueError("BuildStrategy.transport %r needs CUDA places, got %r"
                             % (bs.transport, compiled._places))
        self.mpi = transport["processes"]
        if self.mpi:
            # This process is one rank of the MPI world: its programs only, in `scope`.
            if getattr(compiled, "_places_given", False) and len(compiled._places) != 1:
                raise ValueError(
                    "transport 'mpi' runs one place per process, got places=%r: start one "
                    "process per rank with mpirun -np N instead" % (compiled._places,))
            rank, n = core.mpi_init()
            mpi_cleanup.track(scope, [])  # MPI_Finalize at exit even if the setup below fails
            if trainers > 1 and (n != trainers or rank != int(getattr(bs, "trainer_id", rank))):
                raise ValueError(
                    "num_trainers %d / trainer_id %d, but this process is MPI rank %d of %d: "
                    "start one process per trainer (loom launch --workers %d --clients 1)"
                    % (trainers, int(getattr(bs, "trainer_id", 0)), rank, n, trainers))
            ranks, group, names = [rank], "mpi", []
            places = [core.Place.cpu(0)]
        else:
            # CPU places are threads over the in-process transport (all on cpu:0's allocator
            # settings); CUDA places are threads with one GPU each, meeting over NCCL unless
            # another CUDA transport is asked for.
            n = len(compiled._places)
            cuda = not compiled._places[0].is_cpu_place()
            ranks, group = list(range(n)), "py:%d" % next(_group_ids)
            places = list(compiled._places) if cuda else [core.Place.cpu(0)] * n
            names = [repr(p) for p in places] if cuda else []
            transport_name = (bs.transport if transport["device"] == "cuda" else _CUDA_DEFAULT) \
                if cuda else bs.transport
        fuse_mb = float(bs.fuse_grad_size_in_MB) if bs.fuse_all_reduce_ops else 0.0
        startups, mains, manifest = core.transpile_data_parallel(
            core.ProgramDesc(), compiled._program.desc, n, mode=bs._mode(),
            algorithm=bs.allreduce_algorithm, fuse_grad_size_mb=fuse_mb,
            grad_scale=bs._grad_scale(), owner_policy=bs.owner_policy, group=group,
            keep_startup_init=False, timeout_ms=int(bs.collective_timeout_ms),
            transport=transport_name, places=names,
            grad_compression=bs.gradient_compression or "")
        self.manifest = manifest
        if getattr(bs, "sync_batch_norm", False):
            if not places[0].is_cpu_place():
                raise NotImplementedError("BuildStrategy.sync_batch_norm: CPU places only, got %r"
                                          % (compiled._places,))
            for r in ranks:
                _sync_batch_norms(mains[r])
        self.mains = [mains[r] for r in ranks]  # the programs this process runs
        self.version = compiled._program._version
        self.scopes = [scope] + [core.Scope() for _ in ranks[1:]]
        # Rank 0's scope holds the initialized parameters; the other local ranks start from
        # copies (then rank 0 broadcasts its parameters in startup).
        for i, r in enumerate(ranks):
            if i > 0 or not places[i].is_cpu_place():
                core.copy_persistables(mains[r], scope, self.scopes[i], places[i])
        self.runner = core.Runner([startups[r] for r in ranks], self.mains, places, self.scopes,
                                  ranks[0], n)
        if self.mpi:
            block = startups[ranks[0]].block(0)
            mpi_cleanup.track(scope, [block.op(i).output("Comm")[0]
                                      for i in range(block.op_size())
                                      if block.op(i).type() == "comm_init"])
        # comm_init and the broadcast of every parameter from rank 0.
        self.runner.startup()
        self.generation = scope.persistables_generation()


def _sync_batch_norms(main):
    """BuildStrategy.sync_batch_norm: the training-mode batch_norm ops of a rank's main block
    (and their grad ops) become sync_batch_norm ops over the rank's communicator; the grad ops
    also read the rank's sample weight when the gradients are weighed by it."""
    block = main.block(0)
    ops = [block.op(i) for i in range(block.op_size())]
    comm = weight = None
    for op in ops:
        if op.type() == "sample_weight":
            weight = op.output("Out")[0]
        if comm is None and "Comm" in op.input_names():
            comm = op.input("Comm")[0]
    if comm is None:
        return
    for op in ops:
        if op.type() not in ("batch_norm", "batch_norm_grad") or op.attr("is_test"):
            continue
        grad = op.type() == "batch_norm_grad"
        op.set_type("sync_batch_norm_grad" if grad else "sync_batch_norm")
        op.set_input("Comm", [comm])
        if grad and weight is not None:
            op.set_input("Weight", [weight])


def _merge_place_feeds(feeds, mpi):
    """One global batch from per-place feed dicts (a DataLoader's step): each variable's
    arrays concatenated along dim 0, in place order (the runner splits it over the places
    again). Under MPI a process feeds its own rank: one dict."""
    if mpi and len(feeds) != 1:
        raise ValueError("transport 'mpi': pass this process's feed as one dict, not %d"
                         % len(feeds))
    if not feeds or not all(isinstance(f, dict) for f in feeds):
        raise TypeError("a per-place feed is a non-empty list of dicts")
    names = set(feeds[0])
    for i, f in enumerate(feeds):
        if set(f) != names:
            raise ValueError("per-place feed %d has variables %s, feed 0 has %s"
                             % (i, sorted(f), sorted(names)))
    if len(feeds) == 1:
        return feeds[0]
    return {n: np.concatenate([np.asarray(f[n]) for f in feeds]) for n in feeds[0]}


class CompiledProgram:
    """A program compiled for data-parallel execution on several places.

        compiled = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(4), build_strategy=strategy)
        loss_v, = exe.run(compiled, feed={...}, fetch_list=[loss])

    The global feed is split along dim 0 across the places (the first rows % N places get one
    row more; a place may get none). Fetched values come back concatenated along dim 0 in
    place order (Fluid's merged form), or per place with ``return_merged=False``.
    """

    def __init__(self, program_or_graph, build_strategy=None):
        if not isinstance(program_or_graph, Program):
            raise TypeError("CompiledProgram expects a loom.Program, got %r" % (program_or_graph,))
        self._program = program_or_graph
        self._build_strategy = build_strategy or BuildStrategy()
        self._places = None
        self._loss_name = None
        self._states = {}

    def with_data_parallel(self, loss_name=None, build_strategy=None, exec_strategy=None,
                           share_vars_from=None, places=None):
        """Runs the program on ``places`` (default: ``cpu_places()``, CPU_NUM of them)."""
        if build_strategy is not None:
            self._build_strategy = build_strategy
        self._places_given = places is not None
        if places is None:
            places = cpu_places()
        places = list(places)
        _check_place_count(len(places), "with_data_parallel")
        kinds = {p.is_cpu_place() for p in places}
        if len(kinds) > 1:
            raise ValueError("with_data_parallel: places %r mix CPU and CUDA places" % (places,))
        if not places[0].is_cpu_place():
            if not core.is_compiled_with_cuda():
                raise NotImplementedError(
                    "with_data_parallel: CUDA places %r need a build with CUDA and NCCL"
                    % (places,))
            virtual_ok = _transport(getattr(self._build_strategy, "transport", "inprocess"))[
                "shared_devices"]
            if len(set(places)) != len(places) and not virtual_ok:
                raise ValueError("with_data_parallel: places %r repeat a GPU; each place needs "
                                 "a GPU of its own over NCCL (BuildStrategy.transport "
                                 "'cuda_p2p' takes a GPU several times as virtual devices)"
                                 % (places,))
            visible = core.cuda_device_count()
            for p in places:
                if p.device >= visible:
                    raise core.FailedPreconditionError(
                        "with_data_parallel: place %r is not available: %d CUDA device(s) "
                        "visible" % (p, visible))
        self._places = places
        self._loss_name = loss_name
        return self

    @property
    def manifest(self):
        """The transpiler's decisions (owners, buckets, algorithms) as text, once it ran."""
        for st in self._states.values():
            return st.manifest
        return None

    def local_scopes(self, scope=None):
        """The per-place scopes (place 0's is scope itself) after the first run in scope; e.g. to
        change a learning-rate variable on every place."""
        st = self._states.get(id(scope or global_scope()))
        if st is None:
            raise RuntimeError("local_scopes: the compiled program has not run in this scope yet")
        return list(st.scopes)

    def _state(self, scope):
        st = self._states.get(id(scope))
        # Place 0's parameters changed outside this program's runs (its startup program ran
        # again, load_params): the other places take them over again (copies + broadcast), so
        # that the places never silently diverge.
        stale = st is not None and not st.mpi and \
            st.generation != scope.persistables_generation()
        if st is None or st.version != self._program._version or stale:
            st = _RankState(self, scope)
            self._states[id(scope)] = st
        return st

    def _run_with(self, exe, feed, fetch_list, scope, return_numpy, return_merged=True):
        if self._places is None:
            self.with_data_parallel()
        scope = scope or global_scope()
        st = self._state(scope)
        if not feed and getattr(self._program, "_loader", None) is not None:
            feed = self._program._loader._next_feed()  # a non-iterable DataLoader's step
        feed = feed or {}
        if isinstance(feed, (list, tuple)):
            feed = _merge_place_feeds(feed, st.mpi)
        feed = {(k.name if isinstance(k, Variable) else k): v for k, v in feed.items()}
        fetch = [_fetch_name(v) for v in (fetch_list or [])]
        try:
            # Under MPI the feed is this process's rank's own; else the global batch, split.
            st.runner.set_timeline(profiler._timeline())
            out = st.runner.step(feed, fetch, split=not st.mpi)
            st.generation = scope.persistables_generation()
        except core.LoomError:
            # A failed step may have aborted the places' group: the next run forms a new one,
            # starting again from place 0's parameters (in `scope`), as a single-place Executor
            # recovers. (Optimizer state that lived on the other places only is lost.)
            if not st.mpi:
                self._states.pop(id(scope), None)
            raise
        if st.mpi:
            return out[0] if not return_numpy else [np.asarray(t) for t in out[0]]
        if not return_numpy:
            return out
        n = len(out)
        per_place = [[np.asarray(t) for t in rank] for rank in out]
        if not return_merged:
            return [[per_place[r][i] for r in range(n)] for i in range(len(fetch))]
        merged = []
        for i in range(len(fetch)):
            parts = [per_place[r][i] for r in range(n)]
            merged.append(np.concatenate([p.reshape(1) if p.ndim == 0 else p for p in parts]))
        return merged


class ParallelExecutor:
    """Fluid's ParallelExecutor as a thin alias of Executor + CompiledProgram."""

    def __init__(self, use_cuda=False, loss_name=None, main_program=None, build_strategy=None,
                 exec_strategy=None, places=None, scope=None, share_vars_from=None):
        if use_cuda and places is None:
            places = cuda_places()
        self._scope = scope
        self._compiled = CompiledProgram(main_program or default_main_program()).with_data_parallel(
            loss_name=loss_name, build_strategy=build_strategy, places=places)
        self._exe = Executor(core.Place.cpu(0))

    def run(self, fetch_list, feed=None, feed_dict=None, return_numpy=True):
        return self._exe.run(self._compiled, feed=feed if feed is not None else feed_dict,
                             fetch_list=fetch_list, scope=self._scope, return_numpy=return_numpy)
