"""MXNet's KVStore over numpy arrays:

    import loom.kvstore as kvs
    kv = kvs.create("local")            # or "device"
    kv.init(3, np.zeros((2, 3), "float32"))
    kv.push(3, [g0, g1, g2, g3])        # a list (one per device) is summed first
    kv.pull(3, out=[o0, o1])            # fills the outputs in place
    kv.pushpull(3, [g0, g1], out=[o0, o1])
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=0.1, momentum=0.9))

Without an optimizer a push replaces the stored value with the merged sum (MXNet's behaviour,
not a running total); with one, the stored value is updated by it. Keys are ints or strs (one
store takes one kind), or lists of keys with lists of values. `local` sums a list on the CPU in
one pass; `device` treats the list entries as the places' tensors and sums them with Loom's
collectives (an in-process group of one rank per entry). The optimizer reaches the store as a
typed description (name and hyper-parameters) checked against a registry, never as code.
`dist_sync` / `dist_async` run in a job started by `loom launch --workers N --servers S --
python3 train.py`: in a server process, create() serves until every worker is done and then ends
the process (as MXNet's servers do); in a worker it returns the worker's store.
`dist_sync_mpi` / `dist_async_mpi` (`loom launch ... --clients C`): the workers form C MPI
clients; a push is summed inside the client (allreduce over MPI) and the client's rank 0 pushes
the sum to the servers; a pull is rank 0's, broadcast in the client; `kv.client` is the client.
"""
import atexit
import gc
import sys
import weakref

import numpy as np

from . import core
from ._mpi import abort_mpi_job_on_uncaught_exception

_BUILT = ("local", "device", "dist_sync", "dist_async", "dist_sync_mpi", "dist_async_mpi")
_PLANNED = ("dist_device_sync",)


class _Optimizers:
    """Typed descriptions of the optimizers a store runs."""

    class SGD:
        """MXNet's SGD: weight -= learning_rate * (rescale_grad * clip(grad) + wd * weight), with
        momentum through a per-key velocity."""

        def __init__(self, learning_rate=0.01, momentum=0.0, wd=0.0, rescale_grad=1.0,
                     clip_gradient=None):
            self.name = "sgd"
            self.params = {"learning_rate": float(learning_rate), "momentum": float(momentum),
                           "wd": float(wd), "rescale_grad": float(rescale_grad)}
            if clip_gradient is not None:
                self.params["clip_gradient"] = float(clip_gradient)


    class Elastic:
        """Elastic averaging SGD's centre on the store (EASGD's Elastic1): the pushed values are
        the workers' weights, and the centre moves centre += alpha * sum_i (w_i - centre) over
        the pushes merged. Each worker then pulls the centre and moves its own weights
        w -= alpha * (w - centre) (Elastic2), e.g. every few steps of its own training."""

        def __init__(self, alpha=0.5):
            self.name = "elastic"
            self.params = {"alpha": float(alpha)}


optimizer = _Optimizers()


class _Client:
    """The worker's MPI client (dist_sync_mpi / dist_async_mpi): its workers' rank and size and
    collectives over them (Loom's collectives over MPI). Outside those types, a client of one."""

    def __init__(self, kv):
        self._kv = kv  # the KVStore, whose _store is the one reference to the C++ store

    @property
    def _store(self):
        if self._kv._store is None:
            raise RuntimeError("the KVStore is closed")
        return self._kv._store

    @property
    def rank(self):
        return self._store.client_rank

    @property
    def size(self):
        return self._store.client_size

    def allreduce(self, arr, out=None):
        """The sum of arr over the client's workers, into out (a new array when None)."""
        if out is None:
            out = np.empty_like(arr)
        self._store.client_allreduce(arr, out)
        return out

    def broadcast(self, arr, root=0):
        """arr of the client's worker `root` into every worker's arr (in place)."""
        self._store.client_broadcast(arr, int(root))
        return arr


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _check_array(v, what):
    if not isinstance(v, np.ndarray):
        raise TypeError("%s must be a numpy array, got %s" % (what, type(v).__name__))
    return v


class KVStore:
    def __init__(self, store):
        self._store = store
        self.client = _Client(self)

    @property
    def type(self):
        return self._store.type

    @property
    def rank(self):
        return self._store.rank

    @property
    def num_workers(self):
        return self._store.num_workers

    def _pairs(self, key, value, what):
        """(key, [arrays]) pairs: one key with a value (an array, or a list of arrays), or a list
        of keys with a list of values of the same length."""
        if isinstance(key, (list, tuple)):
            values = _as_list(value)
            if len(values) != len(key):
                raise ValueError("%s: %d keys but %d values" % (what, len(key), len(values)))
            return [(k, [_check_array(a, what) for a in _as_list(v)]) for k, v in zip(key, values)]
        return [(key, [_check_array(a, what) for a in _as_list(value)])]

    def init(self, key, value):
        for k, vs in self._pairs(key, value, "init"):
            if len(vs) != 1:
                raise ValueError("init of key %r takes one array, got %d" % (k, len(vs)))
            self._store.init(k, vs[0])

    def push(self, key, value, priority=0):
        for k, vs in self._pairs(key, value, "push"):
            self._store.push(k, vs, int(priority))

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        if out is None:
            raise ValueError("pull needs out= (the arrays to fill in place)")
        for k, outs in self._pairs(key, out, "pull"):
            self._store.pull(k, outs, int(priority))

    def pushpull(self, key, value, out=None, priority=0):
        """push then pull; out defaults to the pushed arrays (filled in place)."""
        for (k, vs), (_, outs) in zip(self._pairs(key, value, "pushpull"),
                                     self._pairs(key, value if out is None else out, "pushpull")):
            self._store.pushpull(k, vs, outs, int(priority))

    def set_optimizer(self, opt):
        if not hasattr(opt, "name") or not hasattr(opt, "params"):
            raise TypeError("set_optimizer takes a loom.kvstore.optimizer description (e.g. "
                            "optimizer.SGD(...)), got %r" % (opt,))
        self._store.set_optimizer(opt.name, opt.params)

    def barrier(self):
        self._store.barrier()

    def close(self):
        """Tells the servers this worker is done (done at exit too)."""
        self._store.close()


_open_stores = weakref.WeakSet()


_mpi_used = False


@atexit.register
def _close_stores():
    for kv in list(_open_stores):
        try:
            kv.close()
        except Exception:  # noqa: BLE001 - the process is ending; the servers time out
            pass
        kv._store = None  # an MPI client's communicator goes before MPI_Finalize
    if _mpi_used:
        gc.collect()
        core.mpi_finalize()


def create(name="local"):
    """A KVStore of type name: "local", "device", "dist_sync" or "dist_async"."""
    if name in _PLANNED:
        raise NotImplementedError(
            "KVStore type %r is not built yet (built: %s)" % (name, ", ".join(_BUILT)))
    if name.startswith("dist") and core.kvstore_launch_role() == "server":
        core.kvstore_serve(name)
        sys.exit(0)
    kv = KVStore(core.KVStore.create(name))
    if name.endswith("_mpi"):
        global _mpi_used
        _mpi_used = True
        abort_mpi_job_on_uncaught_exception()
    if name.startswith("dist"):
        _open_stores.add(kv)
    return kv
