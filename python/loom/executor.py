"""Executor and feeding (Fluid's ``fluid.Executor``); the scopes it runs in are scope.py's."""
import numpy as np

from . import core, profiler
from .dataset import DatasetBase
from .framework import Program, Variable, default_main_program
from .lod_tensor import LoDTensorArray
from .scope import Scope, global_scope, scope_guard
from .transpiler import rpc_ops

__all__ = ["Executor", "global_scope", "scope_guard", "Scope"]


def _fetch_name(v):
    if isinstance(v, Variable):
        return v.name
    if isinstance(v, str):
        return v
    raise TypeError("fetch_list entries must be Variables or names, got %r" % (v,))


def _rows(value):
    """dim 0 of a fed array or tensor without a LoD; None when it has none or carries a LoD."""
    if isinstance(value, core.Tensor):
        if value.lod():
            return None
        shape = value.shape()
    else:
        shape = getattr(value, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) > 0 else None


def check_batch_sizes(program, feed, where="Executor.run"):
    """Feeds of variables declared with a batch dim (-1 first, no LoD) must have as many rows
    as each other: the ops would otherwise fail late, deep inside (accuracy, cross_entropy),
    with an error that names neither feed. Raises ValueError naming both feeds."""
    block = program.global_block().desc
    first = None
    for name in sorted(feed):
        if not block.has_var(name):
            continue
        var = block.find_var(name)
        shape = var.shape()
        if not shape or shape[0] != -1 or var.lod_level() != 0:
            continue
        rows = _rows(feed[name])
        if rows is None:
            continue
        if first is None:
            first = (name, rows)
        elif rows != first[1]:
            raise ValueError(
                "%s: feeds '%s' (%d rows) and '%s' (%d rows) have different batch sizes; both "
                "are declared with batch dim -1 and must have as many rows" %
                (where, first[0], first[1], name, rows))


class Executor:
    """Runs programs on one place: ``exe.run(program, feed={...}, fetch_list=[...])``."""

    def __init__(self, place=None):
        self.place = place if place is not None else core.Place.cpu(0)
        self._exe = core.Executor(self.place)
        self._prepared = {}
        self._trainers = set()  # (trainer_id, endpoints) of parameter-server programs run

    def _prepare(self, program):
        key = id(program.desc)
        entry = self._prepared.get(key)
        # Programs are mutable while being built: re-prepare when they changed. Edits through
        # the Python API bump program._version; the op and block counts catch the rest cheaply.
        fingerprint = (program._version, program.desc.num_blocks(),
                       tuple(program.desc.block(i).op_size()
                             for i in range(program.desc.num_blocks())))
        if entry is None or entry[1] != fingerprint:
            entry = (self._exe.prepare(program.desc, 0), fingerprint, program.desc)
            self._prepared[key] = entry
            rpc = rpc_ops(program)
            if rpc is not None:
                self._trainers.add((rpc[0], tuple(rpc[1])))
        return entry[0]

    def run(self, program=None, feed=None, fetch_list=None, feed_var_name="feed",
            fetch_var_name="fetch", scope=None, return_numpy=True, use_program_cache=True,
            return_merged=True):
        """Runs block 0 of program (default: the default main program). feed maps var names to
        numpy arrays (or core.Tensor); fetch_list names vars (or Variables) whose values are
        returned, as numpy arrays when return_numpy is true. program may be a CompiledProgram
        (data parallel): then fetched values are concatenated over the places, or given per
        place (a list per fetch) with return_merged=False."""
        if program is None:
            program = default_main_program()
        if hasattr(program, "_run_with"):  # CompiledProgram
            return program._run_with(self, feed, fetch_list, scope, return_numpy, return_merged)
        if not isinstance(program, Program):
            raise TypeError("Executor.run: program must be a loom.Program, got %r" % (program,))
        if not feed and getattr(program, "_loader", None) is not None:
            feed = program._loader._next_feed()  # a non-iterable DataLoader's next batch
        if feed is None:
            feed = {}
        if isinstance(feed, (list, tuple)):  # a DataLoader's step: one feed dict per place
            if len(feed) != 1:
                raise ValueError("Executor.run: %d feed dicts (one per place) for a program "
                                 "that runs on one place; run a CompiledProgram with "
                                 "with_data_parallel() on them" % len(feed))
            feed = feed[0]
        if not isinstance(feed, dict):
            raise TypeError("Executor.run: feed must be a dict of name -> numpy array")
        fetch = [_fetch_name(v) for v in (fetch_list or [])]
        feed = {(k.name if isinstance(k, Variable) else k): v for k, v in feed.items()}
        check_batch_sizes(program, feed)
        prepared = self._prepare(program)
        self._exe.set_timeline(profiler._timeline())
        out = self._exe.run(prepared, scope or global_scope(), feed, fetch)
        # a fetched tensor array is a list of tensors: a LoDTensorArray (a list of numpy arrays)
        if return_numpy:
            return [[np.asarray(e) for e in t] if isinstance(t, list) else np.asarray(t)
                    for t in out]  # views of the fetched host copies
        return [LoDTensorArray(t) if isinstance(t, list) else t for t in out]

    def _run_dataset(self, what, program, dataset, scope, fetch_list, fetch_info,
                     print_period):
        if dataset is None or not isinstance(dataset, DatasetBase):
            raise TypeError("%s: dataset must be made by fluid.DatasetFactory, got %r"
                            % (what, dataset))
        fetch_list = list(fetch_list or [])
        fetch_info = list(fetch_info or [_fetch_name(v) for v in fetch_list])
        if len(fetch_info) != len(fetch_list):
            raise ValueError("%s: %d fetch_info names for %d fetches" % (what, len(fetch_info),
                                                                        len(fetch_list)))
        if int(print_period) <= 0:
            raise ValueError("%s: print_period must be positive, got %r" % (what,
                                                                          print_period))
        step = 0
        for feed in dataset._feeds():
            out = self.run(program, feed=feed, fetch_list=fetch_list, scope=scope)
            step += 1
            if fetch_list and step % int(print_period) == 0:
                print("%s step %d: %s" % (what, step, ", ".join(
                    "%s %s" % (n, np.asarray(v).ravel()[:8]) for n, v in zip(fetch_info, out))),
                    flush=True)
        return step

    def train_from_dataset(self, program=None, dataset=None, scope=None, thread=0, debug=False,
                           fetch_list=None, fetch_info=None, print_period=100,
                           fetch_handler=None):
        """Runs program once per batch of dataset (fluid.DatasetFactory), in file order, and
        prints the fetch_list values (labelled by fetch_info) every print_period batches.
        Returns the number of batches run. thread and debug are accepted: the dataset's
        set_thread threads parse the files; the steps run in order on this executor's
        place, so the result equals feeding the same batches to run()."""
        return self._run_dataset("train_from_dataset", program, dataset, scope, fetch_list,
                                 fetch_info, print_period)

    def infer_from_dataset(self, program=None, dataset=None, scope=None, thread=0, debug=False,
                           fetch_list=None, fetch_info=None, print_period=100,
                           fetch_handler=None):
        """train_from_dataset for an inference program (one without backward and optimizer,
        e.g. a for_test clone)."""
        return self._run_dataset("infer_from_dataset", program, dataset, scope, fetch_list,
                                 fetch_info, print_period)

    def close(self):
        """Releases the prepared programs. A parameter-server trainer tells its servers it is
        done (every trainer must: a sync server waits for the others until then)."""
        self._prepared.clear()
        trainers, self._trainers = self._trainers, set()
        for trainer_id, endpoints in sorted(trainers):
            core.ps_close(trainer_id, list(endpoints))
