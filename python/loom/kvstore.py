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

Row-sparse keys (MXNet's row_sparse storage, on every store type):

    w = kvs.row_sparse_array((data, indices), shape=(1000, 8))  # rows `indices` of a [1000, 8]
    kv.init("emb", w)                     # or kv.init_sparse_table("emb", (10**12, 8),
                                          #        initializer=kvs.initializer.Uniform(-0.1, 0.1))
    kv.push("emb", [g0, g1])              # RowSparseArray gradients, merged (rows summed)
    out = kv.row_sparse_pull("emb", row_ids=np.array([5, 3, 5]))   # rows 3 and 5
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


class RowSparseArray:
    """MXNet's row_sparse NDArray over numpy: the rows `indices` (int64, unique, ascending) of a
    dense array of `shape`, their values in `data` ([len(indices)] + shape[1:]); every other row
    is zero. Build one with row_sparse_array()."""

    stype = "row_sparse"

    def __init__(self, data, indices, shape):
        shape = tuple(int(d) for d in shape)
        if len(shape) < 1 or shape[0] < 1 or any(d < 1 for d in shape[1:]):
            raise ValueError("a row-sparse array needs a shape of positive dims, got %r" % (shape,))
        data = np.ascontiguousarray(data)
        if data.dtype not in (np.float32, np.float64):
            raise TypeError("a row-sparse array holds float32 or float64 data, not %s" % data.dtype)
        indices = np.asarray(indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise TypeError("row-sparse indices must be a 1-d integer array, got %s of shape %r"
                            % (indices.dtype, indices.shape))
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        if data.shape != (len(indices),) + shape[1:]:
            raise ValueError("row-sparse data of shape %r does not hold %d rows of %r (shape %r)"
                             % (data.shape, len(indices), shape[1:], shape))
        if len(indices):
            bad = (indices < 0) | (indices >= shape[0])
            if bad.any():
                raise ValueError("row-sparse index %d is outside [0, %d)"
                                 % (indices[bad][0], shape[0]))
            if (np.diff(indices) <= 0).any():
                raise ValueError("row-sparse indices must be unique and ascending (MXNet's "
                                 "row_sparse format), got %r" % (indices.tolist()[:16],))
        self.data, self.indices, self.shape = data, indices, shape

    @property
    def dtype(self):
        """The data's numpy dtype (float32 or float64)."""
        return self.data.dtype

    def asnumpy(self):
        """The dense array: the rows in place, zeros elsewhere."""
        dense = np.zeros(self.shape, self.data.dtype)
        dense[self.indices] = self.data
        return dense

    todense = asnumpy

    def tostype(self, stype):
        """"default" (a dense numpy array) or "row_sparse" (itself)."""
        if stype == "default":
            return self.asnumpy()
        if stype == "row_sparse":
            return self
        raise ValueError("unknown storage type %r (default, row_sparse)" % (stype,))

    def copy(self):
        """A deep copy (data and indices copied)."""
        return RowSparseArray(self.data.copy(), self.indices.copy(), self.shape)

    def __repr__(self):
        return "<RowSparseArray %s %r, %d rows>" % (self.dtype, self.shape, len(self.indices))

    def _wire(self):
        """(data, indices, height): what the C++ store takes."""
        return (self.data, self.indices, self.shape[0])


def row_sparse_array(arg1, shape=None, dtype=None):
    """A RowSparseArray from (data, indices) with shape=, from a dense numpy array (its rows with
    any nonzero element), or a copy of a RowSparseArray; dtype converts the data."""
    if isinstance(arg1, RowSparseArray):
        out = arg1.copy()
    elif isinstance(arg1, tuple) and len(arg1) == 2:
        if shape is None:
            raise ValueError("row_sparse_array((data, indices)) needs shape=")
        out = RowSparseArray(np.array(arg1[0]), np.array(arg1[1]), shape)
    elif isinstance(arg1, np.ndarray):
        dense = arg1 if shape is None else arg1.reshape(shape)
        keep = np.nonzero(dense.reshape(len(dense), -1).any(axis=1))[0] if dense.ndim else []
        out = RowSparseArray(dense[keep], keep, dense.shape)
    else:
        raise TypeError("row_sparse_array takes (data, indices), a numpy array or a "
                        "RowSparseArray, got %s" % type(arg1).__name__)
    if dtype is not None:
        out.data = out.data.astype(dtype)
    return out


def tostype(arr, stype):
    """arr (a numpy array or a RowSparseArray) as storage type "default" or "row_sparse"."""
    if isinstance(arr, RowSparseArray):
        return arr.tostype(stype)
    if stype == "row_sparse":
        return row_sparse_array(np.asarray(arr))
    if stype == "default":
        return np.asarray(arr)
    raise ValueError("unknown storage type %r (default, row_sparse)" % (stype,))


class _Initializers:
    """Typed descriptions of how a sparse table's rows start (init_sparse_table). Row `id` is
    computed from (seed, id) only: the same whatever the number of servers."""

    class Constant:
        """Every element `value`."""

        def __init__(self, value=0.0):
            self.name, self.a, self.b, self.seed = "constant", float(value), 0.0, 0

    class Zero(Constant):
        """Every element 0."""

        def __init__(self):
            super().__init__(0.0)

    class Uniform:
        """Uniform in [low, high) (MXNet's Uniform(scale) is Uniform(-scale, scale))."""

        def __init__(self, low=-0.07, high=0.07, seed=0):
            self.name, self.a, self.b, self.seed = "uniform", float(low), float(high), int(seed)

    class Normal:
        """Gaussian of mean and std (MXNet's Normal(sigma) is Normal(0, sigma))."""

        def __init__(self, mean=0.0, std=0.01, seed=0):
            self.name, self.a, self.b, self.seed = "gaussian", float(mean), float(std), int(seed)


initializer = _Initializers()


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _check_array(v, what):
    if not isinstance(v, (np.ndarray, RowSparseArray)):
        raise TypeError("%s must be a numpy array or a RowSparseArray, got %s"
                        % (what, type(v).__name__))
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
        """Initializes key(s) with a numpy array (a dense key) or a RowSparseArray (a row-sparse
        key holding the dense value of the array). A key is initialized once."""
        for k, vs in self._pairs(key, value, "init"):
            if len(vs) != 1:
                raise ValueError("init of key %r takes one array, got %d" % (k, len(vs)))
            if isinstance(vs[0], RowSparseArray):
                self._store.init_row_sparse(k, vs[0]._wire())
            else:
                self._store.init(k, vs[0])

    def init_sparse_table(self, key, shape, dtype="float32", initializer=None):
        """A row-sparse key of `shape` (shape[0] up to 2**63 - 1) whose rows start as
        `initializer` (kvs.initializer.Constant / Uniform / Normal; zeros by default) makes them,
        each computed from (seed, row id) only. Nothing is allocated until a row is pushed or
        pulled, so the table may be far larger than memory; in distributed stores its rows live
        on the servers, sharded by id."""
        init = initializer if initializer is not None else _Initializers.Zero()
        if not all(hasattr(init, a) for a in ("name", "a", "b", "seed")):
            raise TypeError("init_sparse_table of key %r: initializer must be a "
                            "loom.kvstore.initializer description, got %r" % (key, init))
        shape = tuple(int(d) for d in shape)
        if not 1 <= len(shape) <= 9:
            raise ValueError("init_sparse_table of key %r: shape %r needs 1 to 9 dims"
                             % (key, shape))
        if not 1 <= shape[0] <= 2**63 - 1:
            raise ValueError("init_sparse_table of key %r: height %d is not in [1, 2**63 - 1]"
                             % (key, shape[0]))
        self._store.init_sparse_table(key, shape[0], list(shape[1:]), np.dtype(dtype).name,
                                      init.name, init.a, init.b, init.seed)

    def push(self, key, value, priority=0):
        """Pushes an array (or a list, one per device, merged first) to key(s). A row-sparse key
        takes RowSparseArrays: merged (rows summed), then the optimizer updates only the pushed
        rows, or without one the merged rows become the key's value."""
        for k, vs in self._pairs(key, value, "push"):
            sparse = [isinstance(v, RowSparseArray) for v in vs]
            if any(sparse):
                if not all(sparse):
                    raise TypeError("push of key %r mixes row-sparse and dense arrays" % (k,))
                self._store.push_row_sparse(k, [v._wire() for v in vs], int(priority))
            else:
                self._store.push(k, vs, int(priority))

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """The rows row_ids asks for (any order, repeats allowed) of a row-sparse key, unique and
        ascending, as RowSparseArrays. out: a RowSparseArray or a list of them (one per device),
        refilled in place and returned; None returns a new one. row_ids: one array of ids for
        every out, or a list of arrays, one per out."""
        if row_ids is None:
            raise ValueError("row_sparse_pull of key %r needs row_ids=" % (key,))
        if isinstance(key, (list, tuple)):
            raise TypeError("row_sparse_pull takes one key, got a list %r" % (key,))
        outs = None if out is None else _as_list(out)
        for o in outs or []:
            if not isinstance(o, RowSparseArray):
                raise TypeError("row_sparse_pull of key %r: out must be RowSparseArrays, got %s"
                                % (key, type(o).__name__))
        ids = row_ids if isinstance(row_ids, (list, tuple)) and len(row_ids) and not np.isscalar(
            row_ids[0]) else [row_ids]
        lists = []
        for r in ids:
            a = np.asarray(r)
            if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise TypeError("row_sparse_pull of key %r: row_ids must be 1-d integer arrays, "
                                "got %s of shape %r" % (key, a.dtype, a.shape))
            lists.append(a.astype(np.int64).tolist())
        n = len(outs) if outs is not None else len(lists)
        if len(lists) not in (1, n):
            raise ValueError("row_sparse_pull of key %r: %d row_ids lists for %d outputs"
                             % (key, len(lists), n))
        got = self._store.row_sparse_pull(key, lists, n, int(priority))
        result = []
        for i, (data, idx, height) in enumerate(got):
            shape = (int(height),) + tuple(data.shape[1:])
            if outs is not None:
                outs[i].data, outs[i].indices, outs[i].shape = data, idx, shape
                result.append(outs[i])
            else:
                r = RowSparseArray.__new__(RowSparseArray)
                r.data, r.indices, r.shape = data, idx, shape
                result.append(r)
        return result[0] if (out is None and len(result) == 1) or (
            out is not None and not isinstance(out, (list, tuple))) else result

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        if out is None:
            raise ValueError("pull needs out= (the arrays to fill in place)")
        for k, outs in self._pairs(key, out, "pull"):
            if any(isinstance(o, RowSparseArray) for o in outs):
                raise TypeError("pull of key %r into a RowSparseArray: pull a row-sparse key with "
                                "row_sparse_pull(key, out=..., row_ids=...)" % (k,))
            self._store.pull(k, outs, int(priority))

    def pushpull(self, key, value, out=None, priority=0):
        """push then pull; out defaults to the pushed arrays (filled in place)."""
        for (k, vs), (_, outs) in zip(self._pairs(key, value, "pushpull"),
                                     self._pairs(key, value if out is None else out, "pushpull")):
            if any(isinstance(a, RowSparseArray) for a in vs + outs):
                raise TypeError("pushpull of key %r with RowSparseArrays: push them, then "
                                "row_sparse_pull (MXNet's pushpull is dense only)" % (k,))
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
