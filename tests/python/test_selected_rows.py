"""SelectedRows: an embedding with is_sparse=True has a sparse gradient (the looked-up rows), and
every optimizer, sum, scale, weight decay and clipping by global norm handle it. The sparse and
the dense paths give the same parameters in float64 (1e-12)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import loom as fluid
from loom import core

ROWS, WIDTH = 50, 4
HERE = os.path.dirname(os.path.abspath(__file__))


def _batches(seed, steps=4, batch=6):
    rs = np.random.RandomState(seed)
    out = []
    for _ in range(steps):
        ids = rs.randint(0, ROWS, size=(batch, 1)).astype("int64")
        ids[1] = ids[0]  # a repeated id in every batch
        y = rs.randn(batch, 1)
        out.append((ids, y))
    return out


def _train(sparse, make_opt, seed=3, shared=False, padding_idx=None, fetch_grad=False,
           with_start=False):
    """Trains emb -> fc -> square error; returns the final table (and the first step's
    table gradient as fetched, when fetch_grad; the table before training, first, when
    with_start)."""
    rs = np.random.RandomState(seed)
    table = rs.randn(ROWS, WIDTH)
    fc_w = rs.randn(WIDTH, 1)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, 1], dtype="int64")
        y = fluid.data("y", [None, 1], dtype="float64")
        attr = fluid.ParamAttr(name="table",
                               initializer=fluid.initializer.NumpyArrayInitializer(table))
        emb = fluid.layers.embedding(ids, [ROWS, WIDTH], is_sparse=sparse, dtype="float64",
                                     param_attr=attr, padding_idx=padding_idx)
        if shared:  # the table used twice: its gradient is a sum of two
            emb2 = fluid.layers.embedding(ids, [ROWS, WIDTH], is_sparse=sparse,
                                          dtype="float64", param_attr=attr,
                                          padding_idx=padding_idx)
            emb = fluid.layers.elementwise_add(emb, fluid.layers.scale(emb2, 0.5))
        pred = fluid.layers.fc(emb, 1, bias_attr=False, param_attr=fluid.ParamAttr(
            name="fc_w", initializer=fluid.initializer.NumpyArrayInitializer(fc_w)))
        loss = fluid.layers.mean(fluid.layers.square(pred - y))
        make_opt().minimize(loss)
    grad_var = main.global_block().var("table@GRAD")
    want_type = core.VarType.SELECTED_ROWS if sparse else core.VarType.DENSE_TENSOR
    assert grad_var.type == want_type
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    initial = np.array(scope.find_var("table").get_tensor())
    fetched = None
    for k, (i, yy) in enumerate(_batches(seed)):
        out = exe.run(main, feed={"ids": i, "y": yy}, scope=scope,
                      fetch_list=["table@GRAD"] if fetch_grad and k == 0 else [])
        if fetch_grad and k == 0:
            fetched = np.array(out[0])
    final = np.array(scope.find_var("table").get_tensor())
    if with_start:
        return initial, final
    return (final, fetched) if fetch_grad else final


OPTIMIZERS = {
    "sgd": lambda: fluid.optimizer.SGD(0.1),
    "momentum": lambda: fluid.optimizer.Momentum(0.1, momentum=0.9),
    "nesterov": lambda: fluid.optimizer.Momentum(0.1, momentum=0.9, use_nesterov=True),
    "adagrad": lambda: fluid.optimizer.Adagrad(0.1),
    "decayed_adagrad": lambda: fluid.optimizer.DecayedAdagrad(0.1),
    "adam": lambda: fluid.optimizer.Adam(0.05),
    "lazy_adam": lambda: fluid.optimizer.Adam(0.05, lazy_mode=True),
    "rmsprop": lambda: fluid.optimizer.RMSProp(0.05),
    "sgd_l2": lambda: fluid.optimizer.SGD(0.1, regularization=fluid.regularizer.L2Decay(0.01)),
    "adam_l1": lambda: fluid.optimizer.Adam(0.05,
                                            regularization=fluid.regularizer.L1Decay(0.01)),
    "sgd_clip": lambda: fluid.optimizer.SGD(
        0.1, grad_clip=fluid.clip.GradientClipByGlobalNorm(0.05)),
    "adam_clip": lambda: fluid.optimizer.Adam(
        0.05, grad_clip=fluid.clip.GradientClipByGlobalNorm(0.05)),
    "sgd_clip_value": lambda: fluid.optimizer.SGD(
        0.1, grad_clip=fluid.clip.GradientClipByValue(0.01)),
    "adagrad_clip_norm": lambda: fluid.optimizer.Adagrad(
        0.1, grad_clip=fluid.clip.GradientClipByNorm(0.02)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_sparse_equals_dense_in_float64(name):
    dense = _train(False, OPTIMIZERS[name])
    start, sparse = _train(True, OPTIMIZERS[name], with_start=True)
    assert not np.allclose(sparse, start), "the table did not move"
    np.testing.assert_allclose(sparse, dense, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sgd", "adagrad", "lazy_adam", "momentum"])
def test_shared_table_sums_sparse_gradients(name):
    np.testing.assert_allclose(_train(True, OPTIMIZERS[name], shared=True),
                               _train(False, OPTIMIZERS[name], shared=True),
                               rtol=1e-12, atol=1e-12)


def test_sparse_updates_touch_only_the_looked_up_rows():
    seen = set(int(i) for ids, _ in _batches(3) for i in ids.ravel())
    assert len(seen) < ROWS
    for name in ("sgd", "adagrad", "lazy_adam"):
        start, final = _train(True, OPTIMIZERS[name], with_start=True)
        moved = set(np.nonzero(np.any(final != start, axis=1))[0].tolist())
        assert moved == seen, name


def test_padding_rows_get_no_gradient():
    pad = int(_batches(3)[0][0][0, 0])  # the repeated id of every first batch
    dense = _train(False, OPTIMIZERS["sgd"], padding_idx=pad)
    start, sparse = _train(True, OPTIMIZERS["sgd"], padding_idx=pad, with_start=True)
    np.testing.assert_array_equal(sparse[pad], start[pad])
    np.testing.assert_allclose(sparse, dense, rtol=1e-12, atol=1e-12)


def test_fetching_a_sparse_gradient_gives_it_dense():
    _, dense_grad = _train(False, OPTIMIZERS["sgd"], fetch_grad=True)
    _, sparse_grad = _train(True, OPTIMIZERS["sgd"], fetch_grad=True)
    assert sparse_grad.shape == (ROWS, WIDTH)
    np.testing.assert_allclose(sparse_grad, dense_grad, rtol=1e-12, atol=1e-12)


def _sparse_grad_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, 1], dtype="int64")
        emb = fluid.layers.embedding(ids, [ROWS, WIDTH], is_sparse=True, dtype="float64",
                                     param_attr=fluid.ParamAttr(name="table"))
        loss = fluid.layers.reduce_sum(fluid.layers.square(emb))
        fluid.backward.append_backward(loss)
        g = main.global_block().var("table@GRAD")
        merged = fluid.layers.merge_selected_rows(g)
        values = fluid.layers.get_tensor_from_selected_rows(merged)
        raw = fluid.layers.get_tensor_from_selected_rows(g)
    return main, startup, merged, values, raw


def test_merge_and_get_tensor_layers():
    main, startup, merged, values, raw = _sparse_grad_program()
    assert merged.type == core.VarType.SELECTED_ROWS
    assert values.type == core.VarType.DENSE_TENSOR
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    ids = np.array([[7], [3], [7], [9]], "int64")
    got_values, got_raw = exe.run(main, feed={"ids": ids}, scope=scope,
                                  fetch_list=[values, raw])
    table = np.array(scope.find_var("table").get_tensor())
    # d sum(emb^2) / d emb = 2 emb: one row per looked-up id, repeats kept in the raw gradient.
    np.testing.assert_allclose(got_raw, 2 * table[[7, 3, 7, 9]], rtol=1e-12)
    np.testing.assert_allclose(got_values, np.stack([2 * table[3], 4 * table[7], 2 * table[9]]),
                               rtol=1e-12)


def test_selected_rows_in_a_scope():
    scope = core.Scope()
    sr = scope.var("g").get_selected_rows()
    sr.set_rows([7, 3, 7])
    sr.set_height(10)
    sr.get_tensor().set(np.arange(6, dtype="float64").reshape(3, 2))
    assert scope.find_var("g").is_selected_rows()
    dense = np.array(sr.to_dense())
    assert dense.shape == (10, 2)
    np.testing.assert_array_equal(dense[7], [4, 6])
    np.testing.assert_array_equal(dense[3], [2, 3])
    merged = sr.merged()
    assert merged.rows() == [3, 7] and merged.height() == 10
    np.testing.assert_array_equal(np.array(merged.get_tensor()), [[2, 3], [4, 6]])
    with pytest.raises(Exception, match="SelectedRows"):
        scope.find_var("g").get_tensor()
    scope.var("t").get_tensor().set(np.zeros(2))
    with pytest.raises(Exception, match="dense tensor"):
        scope.find_var("t").get_selected_rows()
    sr.set_rows([7, 30, 1])
    with pytest.raises(Exception, match="outside"):
        sr.to_dense()


def _dp_build(rows, opt):
    main, startup = fluid.Program(), fluid.Program()
    rs = np.random.RandomState(5)
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, 1], dtype="int64")
        y = fluid.data("y", [None, 1], dtype="float64")
        emb = fluid.layers.embedding(ids, [rows, WIDTH], is_sparse=True, dtype="float64",
                                     param_attr=fluid.ParamAttr(
                                         name="table",
                                         initializer=fluid.initializer.NumpyArrayInitializer(
                                             rs.randn(rows, WIDTH))))
        pred = fluid.layers.fc(emb, 1, bias_attr=False, param_attr=fluid.ParamAttr(
            name="fc_w", initializer=fluid.initializer.NumpyArrayInitializer(
                rs.randn(WIDTH, 1))))
        loss = fluid.layers.mean(fluid.layers.square(pred - y))
        OPTIMIZERS[opt]().minimize(loss)
    return main, startup, loss


def _dp_data(rows, seed=7, steps=3, batch=8):
    rs = np.random.RandomState(seed)
    return [(rs.randint(0, rows, size=(batch, 1)).astype("int64"), rs.randn(batch, 1))
            for _ in range(steps)]


@pytest.mark.parametrize("mode", ["allreduce", "owner"])
@pytest.mark.parametrize("opt", ["sgd", "lazy_adam", "momentum", "adam_clip"])
@pytest.mark.parametrize("rows", [400, 3])
def test_data_parallel_sparse_exchange_equals_one_device(mode, opt, rows):
    """2 CPU places exchange the sparse gradient with sparse_allreduce: as rows for a large
    table, dense for a tiny one (the cost model's choice); both equal one device on the whole
    batch in float64, and every rank holds the same table."""
    data = _dp_data(rows)
    main, startup, loss = _dp_build(rows, opt)
    exe = fluid.Executor(fluid.CPUPlace())
    one = core.Scope()
    exe.run(startup, scope=one)
    for i, yy in data:
        exe.run(main, feed={"ids": i, "y": yy}, scope=one)
    want = np.array(one.find_var("table").get_tensor())

    main, startup, loss = _dp_build(rows, opt)
    scope = core.Scope()
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.reduce_strategy = (fluid.BuildStrategy.ReduceStrategy.Reduce if mode == "owner"
                          else fluid.BuildStrategy.ReduceStrategy.AllReduce)
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(2))
    core.reset_collective_op_stats()
    for i, yy in data:
        exe.run(compiled, feed={"ids": i, "y": yy}, fetch_list=[loss], scope=scope)
    stats = core.collective_op_stats()
    assert stats["sparse_calls"] == 2 * len(data)  # one per rank per step
    # Each step, from the ranks' unique counts: rows (each rank sends the larger count as ids
    # and rows) unless that moves more than a ring allreduce of the table.
    want_dense = want_bytes = 0
    for i, _ in data:
        half = len(i) // 2
        k = max(len(np.unique(i[:half])), len(np.unique(i[half:])))
        if 2 * k * (8 + WIDTH * 8) > 2 * rows * WIDTH * 8:
            want_dense += 2
        else:
            want_bytes += 2 * k * (8 + WIDTH * 8)
    assert stats["sparse_dense_calls"] == want_dense
    assert stats["sparse_row_bytes"] == want_bytes
    assert (want_dense > 0) == (rows == 3)  # the tiny table goes dense, the large one never
    tables = [np.array(s.find_var("table").get_tensor())
              for s in compiled._states[id(scope)].scopes]
    np.testing.assert_allclose(tables[0], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(tables[0], tables[1])


def test_a_sparse_gradient_where_a_dense_tensor_is_needed_names_the_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, 1], dtype="int64")
        emb = fluid.layers.embedding(ids, [ROWS, WIDTH], is_sparse=True, dtype="float64",
                                     param_attr=fluid.ParamAttr(name="table"))
        loss = fluid.layers.reduce_sum(emb)
        fluid.backward.append_backward(loss)
        g = main.global_block().var("table@GRAD")
        fluid.layers.reduce_sum(g)  # reads the gradient as a tensor
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(Exception, match=r"reduce_sum.*table@GRAD.*is a SelectedRows"):
        exe.run(main, feed={"ids": np.array([[1], [2]], "int64")}, scope=scope)


@pytest.mark.skipif(not core.is_compiled_with_mpi() or shutil.which("mpirun") is None,
                    reason="Loom built without MPI or no mpirun on PATH")
@pytest.mark.parametrize("rows", [400, 3])
def test_mpi_processes_exchange_sparse_gradients(tmp_path, rows):
    """3 processes under mpirun, uneven shares of each batch (weighted by their rows): every
    rank ends with one device's table, in float64."""
    n, opt = 3, "lazy_adam"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
           os.path.join(HERE, "mpi_sparse_worker.py"), str(tmp_path), str(rows), opt]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    main, startup, loss = _dp_build(rows, opt)
    exe = fluid.Executor(fluid.CPUPlace())
    one = core.Scope()
    exe.run(startup, scope=one)
    for i, yy in _dp_data(rows):
        exe.run(main, feed={"ids": i, "y": yy}, scope=one)
    want = np.array(one.find_var("table").get_tensor())
    tables = [np.load(os.path.join(tmp_path, "rank%d.npy" % r)) for r in range(n)]
    for r in range(n):
        np.testing.assert_allclose(tables[r], want, rtol=1e-12, atol=1e-12, err_msg="rank %d" % r)
        np.testing.assert_array_equal(tables[r], tables[0])
    calls, dense = np.load(os.path.join(tmp_path, "stats0.npy"))
    assert calls == len(_dp_data(rows)) and (dense > 0) == (rows == 3)


@pytest.mark.parametrize("bad_id", [ROWS, -1])
def test_an_id_outside_the_table_names_the_op_and_the_id(bad_id):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, 1], dtype="int64")
        emb = fluid.layers.embedding(ids, [ROWS, WIDTH], is_sparse=True, dtype="float64",
                                     param_attr=fluid.ParamAttr(name="table"))
        fluid.optimizer.SGD(0.1).minimize(fluid.layers.reduce_sum(emb))
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    before = np.array(scope.find_var("table").get_tensor())
    with pytest.raises(Exception, match=r"lookup_table.*id %d .*out of range" % bad_id):
        exe.run(main, feed={"ids": np.array([[1], [bad_id]], "int64")}, scope=scope)
    np.testing.assert_array_equal(np.array(scope.find_var("table").get_tensor()), before)


def test_padding_idx_out_of_range_is_a_build_error():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [None, 1], dtype="int64")
        with pytest.raises(Exception, match="padding_idx"):
            fluid.layers.embedding(ids, [ROWS, WIDTH], is_sparse=True, padding_idx=ROWS)


def _sparse_table_program():
    p = fluid.Program()
    v = p.global_block().desc.var("table")
    v.set_type(core.VarType.SELECTED_ROWS)
    v.set_dtype(core.DataType.FP64)
    v.set_shape([1000, 3])
    v.set_persistable(True)
    w = p.global_block().desc.var("w")
    w.set_dtype(core.DataType.FP64)
    w.set_shape([2])
    w.set_persistable(True)
    return p


def test_params_directories_hold_sparse_tables(tmp_path):
    """A persistable SELECTED_ROWS variable (an exported table) is saved with the parameters
    as a LOOMSROW file, loaded back whole, and a damaged file or a combined file is refused
    naming the table."""
    prog = _sparse_table_program()
    scope = core.Scope()
    s = scope.var("table").get_selected_rows()
    s.set_rows([2, 7, 900])
    s.set_height(1000)
    s.get_tensor().set(np.arange(9, dtype="float64").reshape(3, 3), fluid.CPUPlace())
    scope.var("w").get_tensor().set(np.array([1.5, 2.5]), fluid.CPUPlace())
    d = str(tmp_path / "params")
    core.save_params(prog.desc, scope, d)
    back = core.Scope()
    core.load_params(prog.desc, back, d, fluid.CPUPlace())
    r = back.find_var("table").get_selected_rows()
    assert r.rows() == [2, 7, 900] and r.height() == 1000
    np.testing.assert_array_equal(np.array(r.get_tensor()), np.arange(9).reshape(3, 3))
    np.testing.assert_array_equal(np.array(back.find_var("w").get_tensor()), [1.5, 2.5])
    path = os.path.join(d, "table")
    data = bytearray(open(path, "rb").read())
    data[-12] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(Exception, match="table"):
        core.load_params(prog.desc, core.Scope(), d, fluid.CPUPlace())
    with pytest.raises(Exception, match="sparse table 'table'.*without params_filename"):
        core.save_params_combined(prog.desc, scope, str(tmp_path / "all.params"))
