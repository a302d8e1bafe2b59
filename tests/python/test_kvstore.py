"""loom.kvstore, local and device: MXNet's semantics with exact values (a push replaces the
stored value with the merged sum; an optimizer updates it instead), key kinds, lists, pushpull,
and bad input."""
import numpy as np
import pytest

import loom.kvstore as kvs
from loom import core

TYPES = ["local", "device"]


def pushed(workers, step, shape=(2, 3), dtype="float32"):
    """Worker w's value at step k: (w + 1) * (k + 1) everywhere, plus the index."""
    base = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    return [((w + 1) * (step + 1) + base).astype(dtype) for w in range(workers)]


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_push_replaces_the_value_with_the_merged_sum(kind, workers):
    kv = kvs.create(kind)
    assert (kv.type, kv.rank, kv.num_workers) == (kind, 0, 1)
    kv.init(3, np.zeros((2, 3), "float32"))
    for k in range(3):
        vals = pushed(workers, k)
        kv.push(3, vals)
        outs = [np.empty((2, 3), "float32") for _ in range(2)]
        kv.pull(3, out=outs)
        want = np.sum(vals, axis=0)  # not a running total over the steps
        for o in outs:
            np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_every_dtype_sums_exactly(kind, dtype):
    kv = kvs.create(kind)
    kv.init("w", np.zeros(5, dtype))
    vals = [np.full(5, w + 1, dtype) for w in range(3)]
    out = np.empty(5, dtype)
    kv.pushpull("w", vals, out=[out])
    np.testing.assert_array_equal(out, np.full(5, 6, dtype))


@pytest.mark.parametrize("kind", TYPES)
def test_sgd_with_momentum_and_weight_decay_follows_the_closed_form(kind):
    kv = kvs.create(kind)
    lr, mu, wd, rescale = 0.1, 0.9, 0.01, 0.5
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=lr, momentum=mu, wd=wd, rescale_grad=rescale))
    w = np.linspace(-1, 1, 6).reshape(2, 3)
    kv.init(0, w.copy())
    mom = np.zeros_like(w)
    for k in range(4):
        grads = [np.full((2, 3), 0.25 * (i + 1) * (k + 1)) for i in range(2)]
        kv.push(0, grads)
        g = rescale * np.sum(grads, axis=0) + wd * w
        mom = mu * mom - lr * g
        w = w + mom
    out = np.empty((2, 3))
    kv.pull(0, out=out)
    np.testing.assert_allclose(out, w, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("kind", TYPES)
def test_elastic_moves_the_centre_toward_the_pushed_weights(kind):
    kv = kvs.create(kind)
    kv.set_optimizer(kvs.optimizer.Elastic(alpha=0.25))
    c = np.linspace(0, 1, 4)
    kv.init(5, c.copy())
    ws = [np.full(4, 2.0), np.full(4, -1.0)]
    for _ in range(3):
        kv.push(5, ws)
        c = c + 0.25 * sum(w - c for w in ws)
        out = np.empty(4)
        kv.pull(5, out=out)
        np.testing.assert_allclose(out, c, rtol=1e-14)
        ws = [w - 0.25 * (w - c) for w in ws]  # Elastic2, on the workers


def test_sgd_clips_the_rescaled_gradient():
    kv = kvs.create("local")
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=1.0, clip_gradient=0.5))
    kv.init(1, np.zeros(3))
    kv.push(1, np.array([2.0, -0.25, -3.0]))
    out = np.empty(3)
    kv.pull(1, out=out)
    np.testing.assert_array_equal(out, [-0.5, 0.25, 0.5])


@pytest.mark.parametrize("kind", TYPES)
def test_lists_of_keys_and_pushpull_in_place(kind):
    kv = kvs.create(kind)
    kv.init(["a", "b"], [np.zeros(4, "float32"), np.ones(2, "float32")])
    a = [np.full(4, 1, "float32"), np.full(4, 2, "float32")]
    b = [np.full(2, 5, "float32"), np.full(2, 7, "float32")]
    kv.push(["a", "b"], [a, b])
    oa, ob = np.empty(4, "float32"), np.empty(2, "float32")
    kv.pull(["a", "b"], out=[oa, ob])
    np.testing.assert_array_equal(oa, np.full(4, 3))
    np.testing.assert_array_equal(ob, np.full(2, 12))
    kv.pushpull("a", a)  # no out: the pushed arrays receive the result
    for x in a:
        np.testing.assert_array_equal(x, np.full(4, 3))


def test_device_equals_local_on_large_random_lists():
    rng = np.random.RandomState(0)
    vals = [rng.randn(1 << 16).astype("float32") for _ in range(4)]
    outs = {}
    for kind in TYPES:
        kv = kvs.create(kind)
        kv.init(7, np.zeros(1 << 16, "float32"))
        kv.push(7, vals)
        outs[kind] = [np.empty(1 << 16, "float32") for _ in range(4)]
        kv.pull(7, out=outs[kind])
    want = np.sum(vals, axis=0)
    np.testing.assert_allclose(outs["local"][0], want, rtol=1e-6, atol=1e-6)
    for o in outs["device"]:
        np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)


def test_a_device_store_reduces_any_list_as_mxnet_does():
    """A key pushed from 4 devices may be pushed from 3, and pushpulled as one array with one
    output (MXNet's device store reduces whatever list it is given)."""
    rng = np.random.RandomState(0)
    kv = kvs.create("device")
    kv.init(1, np.zeros(5, "float64"))
    four = [rng.randn(5) for _ in range(4)]
    kv.push(1, four)
    out = np.empty(5)
    kv.pull(1, out=out)
    np.testing.assert_allclose(out, np.sum(four, axis=0), rtol=1e-12)
    three = [rng.randn(5) for _ in range(3)]
    kv.push(1, three)
    kv.pull(1, out=[out] * 2)  # a pull fills any number of outputs
    np.testing.assert_allclose(out, np.sum(three, axis=0), rtol=1e-12)
    one, o = rng.randn(5), np.empty(5)
    kv.pushpull(1, one, out=o)
    np.testing.assert_array_equal(o, one)
    outs = [np.empty(5) for _ in range(4)]
    kv.pushpull(1, four, out=outs)  # back to four devices: the sum lands in every output
    for x in outs:
        np.testing.assert_allclose(x, np.sum(four, axis=0), rtol=1e-12)
    kv.pull(1, out=o)
    np.testing.assert_allclose(o, np.sum(four, axis=0), rtol=1e-12)
    local = kvs.create("local")  # a local store's list is only summed: any length
    local.init(1, np.zeros(3, "float32"))
    local.push(1, [np.ones(3, "float32")] * 4)
    local.push(1, [np.ones(3, "float32")] * 3)


@pytest.mark.parametrize("kind", TYPES)
def test_bad_input_is_a_clear_error(kind):
    kv = kvs.create(kind)
    out = np.empty(3, "float32")
    with pytest.raises(core.NotFoundError, match="never initialized"):
        kv.pull(9, out=out)
    kv.init(9, np.zeros(3, "float32"))
    with pytest.raises(core.AlreadyExistsError, match="initialized already"):
        kv.init(9, np.zeros(4, "float32"))
    with pytest.raises(core.InvalidArgumentError, match=r"float32\[4\].*float32\[3\]"):
        kv.push(9, np.zeros(4, "float32"))
    with pytest.raises(core.InvalidArgumentError, match="float64"):
        kv.push(9, np.zeros(3, "float64"))
    with pytest.raises(core.InvalidArgumentError, match="int keys"):
        kv.push("nine", np.zeros(3, "float32"))
    with pytest.raises(core.InvalidArgumentError, match="int or a str"):
        kv.push(9.0, np.zeros(3, "float32"))
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        kv.push([9, 10], [np.zeros(3, "float32")])
    with pytest.raises(core.InvalidArgumentError, match="writable"):
        kv.pull(9, out=np.zeros(6, "float32")[::2])
    with pytest.raises(core.InvalidArgumentError, match="no hyper-parameter 'lr'"):
        kv._store.set_optimizer("sgd", {"lr": 0.1})
    with pytest.raises(core.InvalidArgumentError, match=r"alpha must be in \(0, 1\]"):
        kv._store.set_optimizer("elastic", {"alpha": 2.0})
    with pytest.raises(core.InvalidArgumentError, match="unknown optimizer 'pickle'"):
        kv._store.set_optimizer("pickle", {})
    with pytest.raises(core.FailedPreconditionError, match="loom launch"):
        kvs.create("dist_sync")  # outside a launched job
    with pytest.raises(core.FailedPreconditionError, match="--clients"):
        kvs.create("dist_sync_mpi")
    with pytest.raises(NotImplementedError, match="dist_device_sync"):
        kvs.create("dist_device_sync")


@pytest.mark.parametrize("kind,workers,clients", [
    ("dist_sync", 2, 0), ("dist_async", 2, 0), ("dist_sync esgd", 2, 0),
    ("dist_sync_mpi", 4, 2), ("dist_async_mpi", 3, 2)])
def test_distributed_stores_under_loom_launch(kind, workers, clients):
    """2 servers: rank 0's init wins, sync pulls see the merged sum of every worker's push, a key
    over the sharding bound is split over both servers, SGD runs on the servers. With --clients
    the workers are MPI clients: a push is summed in the client first, and kv.client works."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    import loom as fluid
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    env = dict(os.environ, PYTHONPATH=path, LOOM_KVSTORE_BIGARRAY_BOUND="100",
               LOOM_PS_CONNECT_TIMEOUT_MS="30000")
    if clients and not core.is_compiled_with_mpi():
        pytest.skip("Loom was built without MPI: the MPI-client stores are not tested")
    if clients and subprocess.run("command -v mpirun", shell=True).returncode != 0:
        pytest.skip("mpirun is not installed: the MPI-client stores are not tested")
    proc = subprocess.run([loom, "launch", "--workers", str(workers), "--servers", "2",
                           "--clients", str(clients), "--timeout", "120",
                           "--", sys.executable, os.path.join(here, "kvstore_worker.py")] + kind.split(),
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w in range(workers):
        assert "[worker %d] worker %d ok" % (w, w) in proc.stdout, proc.stdout


@pytest.mark.parametrize("kind,workers,servers,clients", [
    ("dist_sync", 2, 2, 0), ("dist_sync_mpi", 4, 2, 2), ("dist_sync_mpi", 3, 0, 1)])
def test_sync_training_through_a_store_equals_single_process_training(kind, workers, servers,
                                                                      clients, tmp_path):
    """Every worker ends with the same weights, equal (float64, 1e-12) to one process running
    SGD on the union of the workers' batches: through servers, through MPI clients and servers,
    and with pure MPI (no servers: every rank keeps the store, pushes summed over MPI)."""
    import os
    import subprocess
    import sys
    import loom as fluid
    from kvstore_sgd_worker import single_process
    if clients and not core.is_compiled_with_mpi():
        pytest.skip("Loom was built without MPI: the MPI-client stores are not tested")
    if clients and subprocess.run("command -v mpirun", shell=True).returncode != 0:
        pytest.skip("mpirun is not installed: the MPI-client stores are not tested")
    here = os.path.dirname(os.path.abspath(__file__))
    build_dir = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build_dir, "tools", "loom"))
    path = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__))),
                            here])
    proc = subprocess.run(
        [loom, "launch", "--workers", str(workers), "--servers", str(servers), "--clients",
         str(clients), "--timeout", "120", "--", sys.executable,
         os.path.join(here, "kvstore_sgd_worker.py"), kind, str(tmp_path)],
        capture_output=True, text=True, timeout=180, env=dict(os.environ, PYTHONPATH=path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = [np.load(tmp_path / ("worker%d.npz" % r)) for r in range(workers)]
    for n, want in single_process(workers).items():  # one process, the union batch, plain SGD
        for r in range(workers):
            np.testing.assert_allclose(got[r][n], want, rtol=1e-12, atol=1e-14,
                                       err_msg="%s of worker %d" % (n, r))


def test_a_client_rank_dying_ends_the_job_naming_it():
    """Worker 3 (rank 1 of client 1) is killed mid-training: its mpirun, then the launcher, stop
    the job within bounded time, naming the client and the rank."""
    import os
    import subprocess
    import sys
    import time
    if not core.is_compiled_with_mpi() or subprocess.run("command -v mpirun",
                                                         shell=True).returncode != 0:
        pytest.skip("no MPI: the MPI-client stores are not tested")
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    import loom as fluid
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    env = dict(os.environ, PYTHONPATH=path, LOOM_KVSTORE_BIGARRAY_BOUND="100", KV_DIE_RANK="3",
               LOOM_PS_TIMEOUT_MS="3000", LOOM_PS_HEARTBEAT_MS="200")
    import glob
    sockets = set(glob.glob("/tmp/loom-ps-*.sock"))
    begin = time.time()
    proc = subprocess.run([loom, "launch", "--workers", "4", "--servers", "2", "--clients", "2",
                           "--timeout", "120", "--", sys.executable,
                           os.path.join(here, "kvstore_worker.py"), "dist_sync_mpi"],
                          capture_output=True, text=True, timeout=180, env=env)
    for path in set(glob.glob("/tmp/loom-ps-*.sock")) - sockets:
        os.unlink(path)  # the stopped servers' Unix sockets (a SIGTERM skips their cleanup)
    assert proc.returncode != 0
    assert "worker 3 killed by signal 9" in proc.stderr and "client 1" in proc.stderr, proc.stderr
    assert time.time() - begin < 60


def _launch_exit_worker(kind, *extra):
    import os
    import subprocess
    import sys
    if not core.is_compiled_with_mpi() or subprocess.run("command -v mpirun",
                                                         shell=True).returncode != 0:
        pytest.skip("no MPI: the MPI-client stores are not tested")
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    import loom as fluid
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    env = dict(os.environ, PYTHONPATH=path, LOOM_PS_CONNECT_TIMEOUT_MS="30000")
    return subprocess.run([loom, "launch", "--workers", "4", "--servers", "2", "--clients", "2",
                           "--timeout", "120", "--", sys.executable,
                           os.path.join(here, "kvstore_exit_worker.py"), kind] + list(extra),
                          capture_output=True, text=True, timeout=180, env=env)


@pytest.mark.parametrize("kind", ["dist_sync_mpi", "dist_async_mpi"])
def test_an_mpi_client_script_that_passes_and_calls_sys_exit_0_exits_0(kind):
    """The store and kv.client held by globals to the end, then sys.exit(0): whatever order the
    exit handler, the interpreter's teardown and the store's destructor run in, no MPI call
    comes after MPI_Finalize, and the job exits 0."""
    proc = _launch_exit_worker(kind)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "MPI_FINALIZE" not in out and "abort" not in out.lower(), out
    for w in range(4):
        assert "worker %d checked" % w in proc.stdout, out


def test_an_uncaught_error_on_one_mpi_client_worker_ends_the_job_at_once():
    import time
    begin = time.time()
    proc = _launch_exit_worker("dist_sync_mpi", "fail")
    assert proc.returncode != 0
    assert "worker 1 found its data unreadable" in proc.stderr + proc.stdout
    assert "rank 1: uncaught RuntimeError: ending the MPI job" in proc.stderr + proc.stdout
    assert time.time() - begin < 60
