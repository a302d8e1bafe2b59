"""Distributed lookup tables on the parameter servers (embedding(is_distributed=True)): the table
lives only on the servers, sharded by id, rows made on first touch from the parameter's
initializer (seeded per id); trainers prefetch their batch's rows and push sparse gradients.
Sync mode equals single-process training on the union of the trainers' batches from the same
initial rows, whatever the number of servers; async converges; a negative id is refused on the
trainer before anything reaches a server."""
import threading
import time

import numpy as np
import pytest

import loom as fluid
import loom.kvstore as kvs
from pserver_util import free_ports, value

VOCAB, WIDTH, LOW, HIGH, SEED = 40, 4, -0.5, 0.5, 3


def build(distributed=True, sparse=True, dtype="float64", lr=0.5, vocab=VOCAB, width=WIDTH,
          opt="sgd", padding_idx=None, decay=False):
    """ids -> embedding -> fc -> squared error: (main, startup, loss, emb out, dense params)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        y = fluid.layers.data(name="y", shape=[1], dtype=dtype)
        emb = fluid.layers.embedding(
            ids, size=[vocab, width], is_sparse=sparse, is_distributed=distributed,
            padding_idx=padding_idx, dtype=dtype, param_attr=fluid.ParamAttr(
                name="emb_w", initializer=fluid.initializer.Uniform(LOW, HIGH, seed=SEED)))
        p = fluid.layers.fc(emb, size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        if decay:
            lr = fluid.layers.exponential_decay(lr, decay_steps=2, decay_rate=0.5)
        {"sgd": lambda: fluid.optimizer.SGD(lr),
         "adagrad": lambda: fluid.optimizer.Adagrad(lr),
         "adam": lambda: fluid.optimizer.Adam(0.05),
         "lazy_adam": lambda: fluid.optimizer.Adam(0.05, lazy_mode=True),
         "momentum": lambda: fluid.optimizer.Momentum(lr, momentum=0.9)}[opt]().minimize(loss)
    dense = [q.name for q in main.all_parameters() if distributed is False or q.name != "emb_w"]
    return main, startup, loss, emb, dense


def initial_rows(ids, dtype="float64", width=WIDTH):
    """The rows the servers make for `ids` (unique, ascending): the same initializer, seeded by
    (seed, id), as a local KVStore's sparse table makes them."""
    kv = kvs.create("local")
    kv.init_sparse_table("t", (2**63 - 1, width), dtype=dtype,
                         initializer=kvs.initializer.Uniform(LOW, HIGH, SEED))
    return kv.row_sparse_pull("t", row_ids=np.asarray(ids, np.int64)).data


def make_batches(steps, rows, seed=0, vocab=VOCAB, dtype="float64"):
    rng = np.random.RandomState(seed)
    return [(rng.randint(0, vocab, size=(rows, 1)).astype(np.int64),
             rng.randn(rows, 1).astype(dtype)) for _ in range(steps)]


def run_job(servers, trainers, feeds, sync=True, model=None, probe=None, timeout=60, config=None):
    """Servers and trainers as threads of this process. feeds[k]: trainer k's (ids, y) batches.
    probe: ids every trainer looks up after training (one more step), whose rows come back.
    Returns (losses per trainer, trainer 0's initial dense params, final dense params, probed
    rows, errors)."""
    model = model or {}
    eps = free_ports(servers)
    errors, losses, init, final, probed = [], {}, {}, {}, {}

    def transpiler(k):
        main, startup, loss, emb, dense = build(**model)
        t = fluid.DistributeTranspiler(config)
        t.transpile(k, program=main, pservers=",".join(eps), trainers=trainers, sync_mode=sync,
                    startup_program=startup)
        return t, startup, loss, emb, dense

    def server(i):
        try:
            t, _, _, _, _ = transpiler(0)
            prog, pstart = t.get_pserver_programs(eps[i])
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(pstart, scope=scope)
            exe.run(prog, scope=scope)
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append(("server %d" % i, e))

    def trainer(k):
        try:
            t, startup, loss, emb, dense = transpiler(k)
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(startup, scope=scope)
            if model.get("distributed", True):  # never on a trainer
                assert (scope.find_var("emb_w") is None
                        or not scope.find_var("emb_w").is_initialized())
            if k == 0:
                init.update({n: value(scope, n) for n in dense})
            prog = t.get_trainer_program()
            out = []
            for ids, y in feeds[k]:
                out.append(float(exe.run(prog, feed={"ids": ids, "y": y}, fetch_list=[loss],
                                         scope=scope)[0][0]))
            losses[k] = out
            if k == 0:
                final.update({n: value(scope, n) for n in dense})
            if probe is not None:
                ids = np.asarray(probe, np.int64).reshape(-1, 1)
                y = np.zeros((len(ids), 1), feeds[k][0][1].dtype)
                probed[k] = exe.run(prog, feed={"ids": ids, "y": y}, fetch_list=[emb],
                                    scope=scope)[0]
            exe.close()
        except Exception as e:  # noqa: BLE001
            errors.append(("trainer %d" % k, e))

    threads = [threading.Thread(target=server, args=(i,), daemon=True) for i in range(servers)]
    threads += [threading.Thread(target=trainer, args=(k,), daemon=True) for k in range(trainers)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
        assert not th.is_alive(), ("the job did not finish within %d s; errors so far: %r"
                                   % (timeout, errors))
    return losses, init, final, probed, errors


def train_reference(init, steps, probe, model=None):
    """One process, a local table (is_sparse) starting from the servers' rows for every id:
    (final dense params, losses, rows of `probe` after training)."""
    model = dict(model or {})
    model["distributed"] = False
    main, startup, loss, emb, dense = build(**model)
    dtype = model.get("dtype", "float64")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for n, v in init.items():
        scope.find_var(n).get_tensor().set(v, fluid.CPUPlace())
    table = initial_rows(np.arange(VOCAB), dtype)
    scope.find_var("emb_w").get_tensor().set(table, fluid.CPUPlace())
    losses = [float(exe.run(main, feed={"ids": ids, "y": y}, fetch_list=[loss],
                            scope=scope)[0][0]) for ids, y in steps]
    rows = value(scope, "emb_w")[np.asarray(probe)]
    return {n: value(scope, n) for n in dense if n != "emb_w"}, losses, rows


def split(steps, trainers):
    feeds = [[] for _ in range(trainers)]
    for ids, y in steps:
        n = len(ids)
        bounds = [n * k // trainers for k in range(trainers + 1)]
        for k in range(trainers):
            feeds[k].append((ids[bounds[k]:bounds[k + 1]], y[bounds[k]:bounds[k + 1]]))
    return feeds


@pytest.mark.parametrize("servers,trainers,opt", [(2, 2, "sgd"), (1, 2, "sgd"), (3, 2, "sgd"),
                                                  (2, 2, "adagrad"), (3, 3, "adagrad"),
                                                  (2, 2, "lazy_adam"), (1, 3, "lazy_adam")])
def test_sync_distributed_table_equals_single_process(servers, trainers, opt):
    steps = make_batches(4, 7)  # 7 rows: unequal shares, repeated ids
    probe = np.arange(VOCAB)
    model = {"opt": opt}
    losses, init, final, probed, errors = run_job(servers, trainers, split(steps, trainers),
                                                  probe=probe, model=model)
    assert not errors, errors
    ref, ref_losses, ref_rows = train_reference(init, steps, probe, model)
    for name, want in ref.items():
        np.testing.assert_allclose(final[name], want, rtol=1e-12, atol=1e-12, err_msg=name)
    for k in range(trainers):
        np.testing.assert_allclose(probed[k], ref_rows, rtol=1e-12, atol=1e-12)
    sizes = [len(f[0][0]) for f in split(steps, trainers)]
    for step in range(len(steps)):
        mixed = sum(losses[k][step] * sizes[k] for k in range(trainers)) / sum(sizes)
        np.testing.assert_allclose(mixed, ref_losses[step], rtol=1e-12)


def test_the_server_count_does_not_change_the_rows():
    steps = make_batches(3, 8, seed=5)
    probe = np.arange(VOCAB)
    got = []
    for servers in (1, 2):
        _, _, final, probed, errors = run_job(servers, 2, split(steps, 2), probe=probe)
        assert not errors, errors
        got.append((final, probed[0]))
    np.testing.assert_array_equal(got[0][1], got[1][1])
    for name in got[0][0]:
        np.testing.assert_array_equal(got[0][0][name], got[1][0][name])


def test_ids_beyond_the_declared_height_are_rows_too():
    """A distributed table's declared height is nominal: any int64 id >= 0 gets its row."""
    big = np.array([[0], [10**12], [2**62 + 5], [10**12]], np.int64)
    steps = [(big, np.ones((4, 1)))] * 2
    probe = np.array([10**12, 2**62 + 5, 7])
    _, _, _, probed, errors = run_job(2, 1, [steps], probe=probe)
    assert not errors, errors
    start = initial_rows(probe)  # probe ascending is [7, 1e12, 2**62+5]
    np.testing.assert_array_equal(probed[0][2], start[0])  # id 7 never trained
    assert not np.allclose(probed[0][0], start[1])  # trained


def test_async_distributed_table_converges():
    rng = np.random.RandomState(2)
    target = rng.randn(VOCAB)
    steps = []
    for _ in range(40):
        ids = rng.randint(0, VOCAB, size=(8, 1)).astype(np.int64)
        steps.append((ids, target[ids[:, 0]].reshape(-1, 1)))
    losses, _, _, _, errors = run_job(2, 2, split(steps, 2), sync=False, model={"lr": 0.3})
    assert not errors, errors
    for k in range(2):
        assert np.mean(losses[k][-5:]) < 0.5 * np.mean(losses[k][:5]), losses[k]


def test_a_negative_id_names_the_op_and_the_id_and_changes_nothing():
    eps = free_ports(2)
    main, startup, loss, emb, _ = build()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers=",".join(eps), trainers=1, startup_program=startup)
    errors, probed = [], {}

    def server(i):
        try:
            prog, pstart = t.get_pserver_programs(eps[i])
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(pstart, scope=scope)
            exe.run(prog, scope=scope)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=server, args=(i,), daemon=True) for i in range(2)]
    for th in threads:
        th.start()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    prog = t.get_trainer_program()
    bad = np.array([[3], [-7], [5]], np.int64)
    with pytest.raises(Exception, match=r"distributed_lookup_table.*id -7 at position 1"):
        exe.run(prog, feed={"ids": bad, "y": np.zeros((3, 1))}, fetch_list=[loss], scope=scope)
    probe = np.array([[3], [5]], np.int64)
    out = exe.run(prog, feed={"ids": probe, "y": np.zeros((2, 1))}, fetch_list=[emb],
                  scope=scope)[0]
    np.testing.assert_array_equal(out, initial_rows([3, 5]))  # nothing was applied
    exe.close()
    for th in threads:
        th.join(30)
        assert not th.is_alive()
    assert not errors, errors


def test_other_optimizers_are_refused_at_transpile_time():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[10, 2], is_distributed=True)
        loss = fluid.layers.mean(emb)
        fluid.optimizer.Momentum(0.1, momentum=0.9).minimize(loss)
    t = fluid.DistributeTranspiler()
    with pytest.raises(Exception,
                       match=r"'momentum'.*sgd, adagrad or adam\(lazy_mode=True\)"):
        t.transpile(0, program=main, pservers="127.0.0.1:1,127.0.0.1:2", trainers=1,
                    startup_program=startup)


def test_an_initializer_servers_cannot_make_rows_from_is_named():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(
            ids, size=[10, 2], is_distributed=True,
            param_attr=fluid.ParamAttr(initializer=fluid.initializer.TruncatedNormal(0, 1)))
        fluid.optimizer.SGD(0.1).minimize(fluid.layers.mean(emb))
    t = fluid.DistributeTranspiler()
    with pytest.raises(Exception, match=r"initialized by op 'truncated_gaussian_random'"):
        t.transpile(0, program=main, pservers="127.0.0.1:1,127.0.0.1:2", trainers=1,
                    startup_program=startup)


def _launch(*args, workers=2, servers=2):
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    build_dir = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build_dir, "tools", "loom"))
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    # `loom launch --timeout` ends every process it started when the job overruns; the outer
    # timeout is the test's own deadline.
    proc = subprocess.run(
        [loom, "launch", "--workers", str(workers), "--servers", str(servers), "--timeout",
         "50", "--", sys.executable, os.path.join(here, "pserver_sparse_worker.py")]
        + [str(a) for a in args],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _losses(out):
    import re
    return sorted(re.findall(r"\[worker (\d)\] step (\d+) loss (\S+)", out))


@pytest.mark.parametrize("opt", ["sgd", "adagrad", "adam"])
def test_servers_checkpoint_and_resume_a_distributed_table(tmp_path, opt):
    """save_persistables makes each server write its shard's touched rows (pserver_<id>/
    <table>.sptb) with their optimizer state (Adagrad's accumulators, Adam's moments and beta
    powers); servers that load_persistables it resume: the steps after the checkpoint give the
    losses of a job that never stopped."""
    ckpt = tmp_path / "ckpt"
    common = ("--rows", 1000, "--batch", 16, "--opt", opt)
    whole = _losses(_launch("--steps", 6, *common).stdout)
    _launch("--steps", 3, "--checkpoint", ckpt, *common)
    for i in range(2):
        assert (ckpt / ("pserver_%d" % i) / "embedding_0.w_0.sptb").exists()
    resumed = _losses(_launch("--steps", 3, "--first-step", 3, "--resume", ckpt,
                              *common).stdout)
    assert len(whole) == 12 and len(resumed) == 6, (whole, resumed)
    assert resumed == [w for w in whole if int(w[1]) >= 3], (whole, resumed)


def test_a_billion_row_table_trains_under_loom_launch():
    """fluid.embedding(size=[10**9, 8], is_distributed=True) under `loom launch --workers 2
    --servers 2`: it trains, and no process holds more than the rows it touched (a dense table
    would be 32 GB per server)."""
    import re
    proc = _launch("--steps", 5)
    peaks = re.findall(r"\[(worker|server) (\d)\] (?:trainer|server) peak_rss_kib (\d+)",
                       proc.stdout)
    assert len(peaks) == 4, proc.stdout
    for role, rank, kib in peaks:
        print("%s %s peak RSS %.1f MiB" % (role, rank, int(kib) / 1024))
        assert int(kib) < 1024 * 1024, (role, rank, kib)  # far below 32 GB (and 1 GiB)
    for w in range(2):
        assert "[worker %d] step 4 loss" % w in proc.stdout, proc.stdout


def sliced(min_block=4):
    c = fluid.DistributeTranspilerConfig()
    c.min_block_size = min_block
    return c


@pytest.mark.parametrize("servers,trainers,opt,sync", [
    (2, 2, "sgd", True), (3, 2, "adagrad", True), (2, 3, "adam", True), (1, 2, "momentum", True),
    (2, 2, "sgd", False)])
def test_a_sparse_local_table_sends_rows_and_equals_the_dense_path(servers, trainers, opt, sync):
    """is_sparse=True, is_distributed=False: the table is sliced as a dense parameter, but the
    trainers push its gradient as rows to the block owners. Sync: equal to the dense-gradient
    job and to one process, float64, to 1e-12. Async (one trainer's rows at a time): equal
    to the dense-gradient job when trainers take turns (one trainer here)."""
    steps = make_batches(4, 7, seed=9)
    if not sync:
        trainers = 1
    feeds = split(steps, trainers)
    results = []
    for sparse in (True, False):
        model = {"distributed": False, "sparse": sparse, "opt": opt}
        losses, init, final, _, errors = run_job(servers, trainers, feeds, sync=sync,
                                                 model=model, config=sliced())
        assert not errors, errors
        results.append((losses, init, final))
    (losses, init, final), (dlosses, dinit, dfinal) = results
    for name in final:
        np.testing.assert_allclose(final[name], dfinal[name], rtol=1e-12, atol=1e-12,
                                   err_msg=name)
    if sync:
        model = {"distributed": False, "sparse": True, "opt": opt}
        main, startup, loss, _, params = build(**model)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        for n, v in init.items():
            scope.find_var(n).get_tensor().set(v, fluid.CPUPlace())
        for ids, y in steps:
            exe.run(main, feed={"ids": ids, "y": y}, fetch_list=[loss], scope=scope)
        for name in params:
            np.testing.assert_allclose(final[name], value(scope, name), rtol=1e-12, atol=1e-12,
                                       err_msg=name)


def test_a_sparse_local_table_is_pushed_as_rows():
    """The trainer program pushes the table's gradient with send_sparse (no split_byref of a
    dense gradient); a regularized table's gradient is read on the trainer, so it goes dense."""
    main, startup, _, _, _ = build(distributed=False, sparse=True)
    t = fluid.DistributeTranspiler(sliced())
    t.transpile(0, program=main, pservers="127.0.0.1:1,127.0.0.1:2", trainers=2,
                startup_program=startup)
    ops = [op.type for op in t.get_trainer_program().global_block().ops]
    assert "send_sparse" in ops and "lookup_table_grad" in ops, ops
    assert ops.count("split_byref") == 0, ops  # the fc weight [4, 1] is one block


def test_an_adagrad_accumulator_that_does_not_start_at_zero_is_refused():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[10, 2], is_distributed=True)
        fluid.optimizer.Adagrad(0.1, initial_accumulator_value=0.1).minimize(
            fluid.layers.mean(emb))
    t = fluid.DistributeTranspiler()
    with pytest.raises(Exception, match=r"adagrad's Moment '.*moment' starts at 0.1"):
        t.transpile(0, program=main, pservers="127.0.0.1:1,127.0.0.1:2", trainers=1,
                    startup_program=startup)


def test_a_batch_with_more_ids_than_the_block_has_rows_is_pushed_merged():
    """200 lookups of a 40-row table sliced in 2-3 blocks: each push holds at most one row per
    id (merged on the trainer), so it fits what a server takes for the block."""
    steps = make_batches(3, 200, seed=4)
    results = []
    for sparse in (True, False):
        _, _, final, _, errors = run_job(3, 2, split(steps, 2), config=sliced(),
                                         model={"distributed": False, "sparse": sparse})
        assert not errors, errors
        results.append(final)
    for name in results[0]:
        np.testing.assert_allclose(results[0][name], results[1][name], rtol=1e-12, atol=1e-12)


def test_padding_rows_are_zero_and_get_no_gradient_on_a_distributed_table():
    steps = [(np.where(ids % 5 == 0, 2, ids), y) for ids, y in make_batches(3, 9, seed=6)]
    probe = np.arange(VOCAB)
    model = {"padding_idx": 2}
    losses, init, final, probed, errors = run_job(2, 2, split(steps, 2), probe=probe,
                                                  model=model)
    assert not errors, errors
    ref, ref_losses, ref_rows = train_reference(init, steps, probe, model)
    ref_rows[2] = 0  # the lookup of padding_idx reads zeros
    np.testing.assert_allclose(probed[0], ref_rows, rtol=1e-12, atol=1e-12)
    for name, want in ref.items():
        np.testing.assert_allclose(final[name], want, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("servers,opt", [(2, "sgd"), (3, "lazy_adam")])
def test_a_learning_rate_schedule_drives_the_table_updates(servers, opt):
    """The servers' learning-rate block runs before the table's rows are updated, as before the
    dense optimize blocks: a decayed rate gives single-process rows (2x2 sync, to 1e-12)."""
    steps = make_batches(5, 8, seed=12)
    probe = np.arange(VOCAB)
    model = {"opt": opt, "decay": True}
    losses, init, final, probed, errors = run_job(servers, 2, split(steps, 2), probe=probe,
                                                  model=model)
    assert not errors, errors
    ref, _, ref_rows = train_reference(init, steps, probe, model)
    np.testing.assert_allclose(probed[0], ref_rows, rtol=1e-12, atol=1e-12)
    for name, want in ref.items():
        np.testing.assert_allclose(final[name], want, rtol=1e-12, atol=1e-12, err_msg=name)


def _step_bytes(out):
    """(bytes_sent, bytes_received, unique ids) of every trainer step after the first (which
    also carries the connection's handshakes)."""
    import re
    rows = re.findall(r"\[worker \d\] step (\d+) bytes_sent (\d+) bytes_received (\d+) "
                      r"unique (\d+)", out)
    return [(int(s), int(r), int(u)) for step, s, r, u in rows if int(step) > 0]


def test_bytes_per_step_follow_the_touched_rows():
    """A trainer of a 10^9-row distributed table sends, per step, at most twice the bytes of its
    batch's rows plus the dense parameters (ids, row gradients, the dense gradient and the
    messages' headers); with a 10^6-row table it sends over 10x less than the dense path."""
    row_bytes, dense_bytes = 8 * 4, (8 + 1) * 4  # a table row; the fc weight and bias
    steps = _step_bytes(_launch("--steps", 4, "--report-bytes").stdout)
    assert len(steps) == 2 * 3
    for sent, received, unique in steps:
        assert sent <= 2 * (unique * row_bytes + dense_bytes), (sent, unique)
        assert received <= 2 * (unique * row_bytes + dense_bytes), (received, unique)
    common = ("--rows", 10**6, "--steps", 2, "--report-bytes")
    distributed = _step_bytes(_launch(*common).stdout)
    dense = _step_bytes(_launch("--table", "dense", *common).stdout)
    assert min(s for s, _, _ in dense) >= 10 * max(s for s, _, _ in distributed), (dense,
                                                                                   distributed)


def test_an_inference_model_exports_a_distributed_table(tmp_path):
    """save_inference_model of a trainer's program with a distributed table: the servers'
    touched rows are saved with the model and its lookup serves an id the servers never made
    the row they would have made. The loaded model gives the live job's predictions exactly,
    for trained ids and ids first seen after the export."""
    import numpy as np
    export = tmp_path / "export"
    export.mkdir()
    rng = np.random.RandomState(100)  # trainer 0's first batch: trained ids
    trained = rng.randint(0, 1000, size=(16, 1))[:6]
    probe = np.concatenate([trained, [[5 * 10**8], [123456789012], [999]]]).astype("int64")
    np.save(export / "probe.npy", probe)
    _launch("--steps", 3, "--rows", 10**9, "--batch", 16, "--export", export)
    online = np.load(export / "online.npy")
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        program, feeds, fetches = fluid.io.load_inference_model(str(export / "model"), exe)
        types = [program.global_block().desc.op(i).type()
                 for i in range(program.global_block().desc.op_size())]
        assert "lookup_sparse_table" in types and "distributed_lookup_table" not in types
        got = exe.run(program, feed={feeds[0]: probe}, fetch_list=fetches)[0]
        rows = scope.find_var("embedding_0.w_0").get_selected_rows()
        assert 0 < len(rows.rows()) <= 2 * 3 * 16 and 5 * 10**8 not in rows.rows()
    np.testing.assert_array_equal(got, online)
    # `loom run` serves the same model from the command line
    import os
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    build_dir = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    out = subprocess.run(
        [os.path.join(build_dir, "tools", "loom"), "run", str(export / "model"), "--iters", "1",
         "--feed", "ids=%s" % (export / "probe.npy"), "--print-every", "1"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    printed = "{%s, ...}" % ", ".join("%g" % v for v in online.ravel()[:4])
    assert printed in out.stdout, (out.stdout, online)


def test_loom_run_servers_resume_a_distributed_table(tmp_path):
    """A bundle with a distributed table, transpiled by `loom transpile --mode pserver` and run
    by `loom run` under `loom launch`: --save-params makes the servers write their shards, and
    servers started with --load-params take them back (the rows, with their state)."""
    import os
    import subprocess
    import numpy as np
    from pserver_sparse_worker import build
    here = os.path.dirname(os.path.abspath(__file__))
    build_dir = os.environ.get("LOOM_BUILD_DIR", os.path.join(here, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build_dir, "tools", "loom"))
    main, startup, loss = build(rows=10**6, opt="adagrad")
    rng = np.random.RandomState(0)
    ids = rng.randint(0, 10**6, size=(64, 1)).astype("int64")
    y = rng.randn(64, 1).astype("float32")
    bundle, out, params = tmp_path / "bundle", tmp_path / "ps", tmp_path / "params"
    fluid.io.save_program_bundle(str(bundle), main, startup, ["ids", "y"], [loss.name],
                                 data={"ids": ids, "y": y}, batch_size=16)

    def run(*args, timeout=60):
        p = subprocess.run([loom] + [str(a) for a in args], capture_output=True, text=True,
                           timeout=timeout)
        assert p.returncode == 0, p.stdout + p.stderr
        return p
    run("transpile", bundle, "-o", out, "--mode", "pserver", "--pservers", 2, "--trainers", 2)
    launch = ["launch", "--workers", 2, "--servers", 2, "--timeout", 50, "--", loom, "run", out,
              "--print-every", 1]
    run(*launch, "--iters", 4, "--save-params", params)
    assert (params / "pserver_0" / "embedding_0.w_0.sptb").exists()
    resumed = run(*launch, "--iters", 1, "--load-params", params)
    import re
    counts = [int(n) for n in re.findall(r"table 'embedding_0.w_0' resumes with (\d+) rows",
                                         resumed.stdout + resumed.stderr)]
    assert len(counts) == 2 and sum(counts) > 0, resumed.stdout + resumed.stderr
