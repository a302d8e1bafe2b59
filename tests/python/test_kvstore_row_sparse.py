"""loom.kvstore row-sparse keys (MXNet's row_sparse storage): RowSparseArray, init / push /
row_sparse_pull on local and device with exact values, the lazy SGD update equal to the dense
path on the touched rows, sparse tables from an initializer, bad input; and the distributed
stores (dist_sync, dist_async, the MPI clients) under `loom launch`."""
import os
import subprocess
import sys

import numpy as np
import pytest

import loom.kvstore as kvs
from loom import core

TYPES = ["local", "device"]
HERE = os.path.dirname(os.path.abspath(__file__))


def rsp(rows, shape, base=1.0, dtype="float64"):
    rows = np.asarray(rows, "int64")
    data = (base + np.arange(len(rows) * int(np.prod(shape[1:])))).reshape(
        (len(rows),) + tuple(shape[1:])).astype(dtype)
    return kvs.row_sparse_array((data, rows), shape=shape)


def test_row_sparse_array_converts_both_ways_and_checks_its_format():
    a = rsp([1, 4], (6, 2))
    dense = a.asnumpy()
    assert dense.shape == (6, 2) and (dense[[0, 2, 3, 5]] == 0).all()
    np.testing.assert_array_equal(dense[4], [3, 4])
    b = kvs.row_sparse_array(dense)
    np.testing.assert_array_equal(b.indices, [1, 4])
    np.testing.assert_array_equal(b.data, a.data)
    assert kvs.tostype(dense, "row_sparse").shape == (6, 2)
    np.testing.assert_array_equal(a.tostype("default"), a.todense())
    assert a.tostype("row_sparse") is a
    with pytest.raises(ValueError, match="unique and ascending"):
        kvs.row_sparse_array((np.zeros((2, 2)), [4, 1]), shape=(6, 2))
    with pytest.raises(ValueError, match="unique and ascending"):
        kvs.row_sparse_array((np.zeros((2, 2)), [1, 1]), shape=(6, 2))
    with pytest.raises(ValueError, match="index 6 is outside"):
        kvs.row_sparse_array((np.zeros((1, 2)), [6]), shape=(6, 2))
    with pytest.raises(ValueError, match="does not hold 2 rows"):
        kvs.row_sparse_array((np.zeros((2, 3)), [1, 2]), shape=(6, 2))
    with pytest.raises(TypeError, match="integer"):
        kvs.row_sparse_array((np.zeros((1, 2)), [1.5]), shape=(6, 2))
    with pytest.raises(ValueError, match="needs shape="):
        kvs.row_sparse_array((np.zeros((1, 2)), [1]))


@pytest.mark.parametrize("kind", TYPES)
def test_init_push_and_row_sparse_pull_follow_mxnet(kind):
    kv = kvs.create(kind)
    kv.init("w", rsp([1, 4], (10, 2), base=100))
    got = kv.row_sparse_pull("w", row_ids=np.array([4, 0, 4, 1]))
    np.testing.assert_array_equal(got.indices, [0, 1, 4])
    np.testing.assert_array_equal(got.data, [[0, 0], [100, 101], [102, 103]])
    assert got.shape == (10, 2)
    # No optimizer: the merged push (rows summed over the devices) becomes the whole value.
    kv.push("w", [rsp([2, 4], (10, 2)), rsp([4], (10, 2), base=10)])
    outs = [rsp([], (10, 2)), rsp([], (10, 2))]
    ret = kv.row_sparse_pull("w", out=outs, row_ids=[np.array([1, 2, 4]), np.array([4])])
    assert ret[0] is outs[0]
    np.testing.assert_array_equal(outs[0].data, [[0, 0], [1, 2], [3 + 10, 4 + 11]])
    np.testing.assert_array_equal(outs[1].indices, [4])
    # One row_ids array for several outputs: the same rows in each.
    kv.row_sparse_pull("w", out=outs, row_ids=np.array([2]))
    for o in outs:
        np.testing.assert_array_equal(o.asnumpy()[2], [1, 2])
    # An empty push clears the value; an empty pull returns no rows.
    kv.push("w", rsp([], (10, 2)))
    np.testing.assert_array_equal(kv.row_sparse_pull("w", row_ids=[4]).data, [[0, 0]])
    assert kv.row_sparse_pull("w", row_ids=np.array([], "int64")).data.shape == (0, 2)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("opt", [dict(learning_rate=0.1),
                                 dict(learning_rate=0.05, momentum=0.9, wd=0.01,
                                      rescale_grad=0.5, clip_gradient=0.7)])
def test_a_sparse_push_with_sgd_equals_the_dense_path_on_the_touched_rows(kind, opt):
    """float64: the touched rows equal a dense store's to 1e-12 (the same arithmetic, so in fact
    bit for bit); the rows never pushed keep their initial value (MXNet's lazy update)."""
    shape, touched = (50, 4), np.array([3, 17, 18, 42])
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(shape)
    sparse, dense = kvs.create(kind), kvs.create(kind)
    for kv in (sparse, dense):
        kv.set_optimizer(kvs.optimizer.SGD(**opt))
    sparse.init(1, kvs.row_sparse_array(w0))
    dense.init(1, w0.copy())
    for step in range(4):
        parts = [rng.standard_normal((len(touched),) + shape[1:]) for _ in range(3)]
        sparse.push(1, [kvs.row_sparse_array((p, touched), shape=shape) for p in parts])
        dense_parts = []
        for p in parts:
            d = np.zeros(shape)
            d[touched] = p
            dense_parts.append(d)
        dense.push(1, dense_parts)
    want = np.empty(shape)
    dense.pull(1, out=want)
    got = sparse.row_sparse_pull(1, row_ids=np.arange(shape[0])).asnumpy()
    np.testing.assert_allclose(got[touched], want[touched], rtol=1e-12, atol=1e-12)
    untouched = np.setdiff1d(np.arange(shape[0]), touched)
    np.testing.assert_array_equal(got[untouched], w0[untouched])


@pytest.mark.parametrize("kind", TYPES)
def test_a_sparse_table_starts_from_its_initializer_and_may_be_huge(kind):
    kv = kvs.create(kind)
    kv.init_sparse_table(0, (2**63 - 1, 3), dtype="float32",
                         initializer=kvs.initializer.Uniform(-0.5, 0.5, seed=4))
    ids = np.array([2**62, 5, 2**63 - 2], "int64")
    a = kv.row_sparse_pull(0, row_ids=ids)
    assert a.shape == (2**63 - 1, 3) and a.dtype == np.float32
    assert (np.abs(a.data) <= 0.5).all() and len(np.unique(a.data)) == 9
    # The same seed in another store gives the same rows (computed from (seed, id) only).
    other = kvs.create("local")
    other.init_sparse_table(0, (2**63 - 1, 3), dtype="float32",
                            initializer=kvs.initializer.Uniform(-0.5, 0.5, seed=4))
    np.testing.assert_array_equal(other.row_sparse_pull(0, row_ids=ids[::-1]).data, a.data)
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=1.0))
    kv.push(0, kvs.row_sparse_array((np.ones((1, 3), "float32"), [5]), shape=(2**63 - 1, 3)))
    b = kv.row_sparse_pull(0, row_ids=ids)
    np.testing.assert_allclose(b.data[0], a.data[0] - 1, rtol=1e-6)
    np.testing.assert_array_equal(b.data[1:], a.data[1:])
    kv.init_sparse_table(1, (10, 2), initializer=kvs.initializer.Constant(0.5))
    np.testing.assert_array_equal(kv.row_sparse_pull(1, row_ids=[9]).data, [[0.5, 0.5]])
    kv.init_sparse_table(2, (10, 2), dtype="float64",
                         initializer=kvs.initializer.Normal(1.0, 0.0))
    np.testing.assert_array_equal(kv.row_sparse_pull(2, row_ids=[0]).data, [[1.0, 1.0]])


@pytest.mark.parametrize("kind", TYPES)
def test_bad_input_is_a_clear_error_naming_the_key(kind):
    kv = kvs.create(kind)
    kv.init(7, rsp([1], (10, 2)))
    kv.init(8, np.zeros((10, 2)))
    with pytest.raises(ValueError, match=r"key 7: row id 10 is outside \[0, 10\)"):
        kv.row_sparse_pull(7, row_ids=[3, 10])
    with pytest.raises(ValueError, match=r"key 7 .*the key holds float64 \[10, 3\]|"
                                         r"key 7 .*holds float64 \[10, 2\]"):
        kv.push(7, rsp([1], (10, 3)))
    with pytest.raises(ValueError, match="key 7.*float32"):
        kv.push(7, rsp([1], (10, 2), dtype="float32"))
    with pytest.raises(ValueError, match="key 7.*height 11"):
        kv.push(7, rsp([1], (11, 2)))
    with pytest.raises(ValueError, match="key 8 is dense|key 8: the key is dense"):
        kv.push(8, rsp([1], (10, 2)))
    with pytest.raises(ValueError, match="key 8: the key is dense"):
        kv.row_sparse_pull(8, row_ids=[1])
    with pytest.raises(ValueError, match="key 7: the key is row_sparse"):
        kv.push(7, np.zeros((10, 2)))
    with pytest.raises(ValueError, match="key 7: the key is row_sparse"):
        kv.pull(7, out=np.zeros((10, 2)))
    with pytest.raises(TypeError, match="key 7 into a RowSparseArray.*row_sparse_pull"):
        kv.pull(7, out=rsp([], (10, 2)))
    with pytest.raises(TypeError, match="pushpull of key 7 with RowSparseArrays"):
        kv.pushpull(7, rsp([1], (10, 2)))
    with pytest.raises(TypeError, match="mixes row-sparse and dense"):
        kv.push(7, [rsp([1], (10, 2)), np.zeros((10, 2))])
    with pytest.raises(core.AlreadyExistsError, match="key 7 is initialized already"):
        kv.init(7, rsp([1], (10, 2)))
    with pytest.raises(core.NotFoundError, match="key 9"):
        kv.row_sparse_pull(9, row_ids=[1])
    with pytest.raises(ValueError, match="needs row_ids="):
        kv.row_sparse_pull(7)
    with pytest.raises(ValueError, match="3 row_ids lists for 2 outputs"):
        kv.row_sparse_pull(7, out=[rsp([], (10, 2))] * 2, row_ids=[[1], [2], [3]])
    with pytest.raises(TypeError, match="row_ids must be 1-d integer"):
        kv.row_sparse_pull(7, row_ids=np.array([1.5]))
    with pytest.raises(TypeError, match="out must be RowSparseArrays"):
        kv.row_sparse_pull(7, out=np.zeros((10, 2)), row_ids=[1])
    with pytest.raises(ValueError, match="unknown row initializer"):
        kv._store.init_sparse_table(11, 10, [2], "float32", "xavier", 0, 0, 0)
    with pytest.raises(ValueError, match="low > high"):
        kv.init_sparse_table(11, (10, 2), initializer=kvs.initializer.Uniform(1, 0))
    with pytest.raises(ValueError, match="float32 or float64"):
        kv.init_sparse_table(11, (10, 2), dtype="int32")
    with pytest.raises(TypeError, match="initializer description"):
        kv.init_sparse_table(11, (10, 2), initializer="zeros")
    with pytest.raises(ValueError, match=r"height 0 is not in \[1, 2\*\*63 - 1\]"):
        kv.init_sparse_table(11, (0, 2))
    with pytest.raises(ValueError, match="height 9223372036854775808"):
        kv.init_sparse_table(11, (2**63, 2))
    with pytest.raises(ValueError, match="1 to 9 dims"):
        kv.init_sparse_table(11, (10,) + (1,) * 12)
    with pytest.raises(ValueError, match="too large"):
        kv.init_sparse_table(11, (10, 2**40, 2**40))
    with pytest.raises(ValueError, match="height >= 1"):
        kv._store.init_sparse_table(11, 0, [2], "float32", "constant", 0, 0, 0)


@pytest.mark.parametrize("kind,workers,servers,clients", [
    ("dist_sync", 2, 2, 0), ("dist_async", 3, 2, 0), ("dist_sync", 2, 1, 0),
    ("dist_sync_mpi", 4, 2, 2), ("dist_async_mpi", 3, 2, 2), ("dist_sync_mpi", 3, 0, 1)])
def test_row_sparse_keys_under_loom_launch(kind, workers, servers, clients):
    """Rows sharded over the servers by id: rank 0's init wins, sync pulls see the merge of every
    worker's push (SGD with momentum, equal to a local store replaying every push, float64 to
    1e-12), async ends equal after a barrier, untouched rows keep their value, a huge table's
    rows are the same as a local table's, and mismatched calls are errors naming the key. With
    --clients the workers are MPI clients (and with --servers 0, pure MPI)."""
    import loom as fluid
    if clients and not core.is_compiled_with_mpi():
        pytest.skip("Loom was built without MPI: the MPI-client stores are not tested")
    if clients and subprocess.run("command -v mpirun", shell=True).returncode != 0:
        pytest.skip("mpirun is not installed: the MPI-client stores are not tested")
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    env = dict(os.environ, PYTHONPATH=path, LOOM_PS_CONNECT_TIMEOUT_MS="30000")
    # `loom launch --timeout` ends every process it started when the job overruns; the outer
    # timeout is the test's own deadline.
    proc = subprocess.run([loom, "launch", "--workers", str(workers), "--servers", str(servers),
                           "--clients", str(clients), "--timeout", "120", "--", sys.executable,
                           os.path.join(HERE, "kvstore_row_sparse_worker.py"), kind],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w in range(workers):
        assert "[worker %d] worker %d ok" % (w, w) in proc.stdout, proc.stdout
