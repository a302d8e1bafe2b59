"""Fluid names around training: ModelAverage, ExponentialMovingAverage, LookaheadOptimizer and
Dpsgd against NumPy references (float64), fluid.average.WeightedAverage,
metrics.ChunkEvaluator, require_version, io.multiprocess_reader and the py_reader layers."""
import os

import numpy as np
import pytest

import loom as fluid

RNG = np.random.RandomState(7)
X = RNG.rand(16, 4)
Y = X @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
LR = 0.1


def _linear(opt_fn, seed=1):
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = seed
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="float64")
        pred = fluid.layers.fc(x, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        extra = opt_fn(loss)
    return main, start, loss, extra


def _train(opt_fn, steps, seed=1):
    """Losses, the (w, b) after each step, the initial (w, b), and the optimizer extra."""
    main, start, loss, extra = _linear(opt_fn, seed)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(start)
        get = lambda n: np.array(scope.find_var(n).get_tensor())  # noqa: E731
        init = (get("fc_0.w_0"), get("fc_0.b_0"))
        losses, traj = [], []
        for _ in range(steps):
            losses.append(float(exe.run(main, feed={"x": X, "y": Y}, fetch_list=[loss])[0]))
            traj.append((get("fc_0.w_0"), get("fc_0.b_0")))
        averaged = None
        if extra is not None:
            with extra.apply(exe):
                averaged = (get("fc_0.w_0"), get("fc_0.b_0"))
            # restored on exit
            last = traj[-1] if traj else init
            assert np.array_equal(get("fc_0.w_0"), last[0])
            assert np.array_equal(get("fc_0.b_0"), last[1])
    return losses, traj, init, averaged


def _grads(w, b):
    r = X @ w + b - Y
    return 2.0 / len(X) * X.T @ r, 2.0 / len(X) * r.sum(0)


def test_exponential_moving_average_matches_numpy():
    def opt(loss):
        fluid.optimizer.SGD(LR).minimize(loss)
        ema = fluid.optimizer.ExponentialMovingAverage(0.9)
        ema.update()
        return ema
    steps = 9
    losses, traj, _, averaged = _train(opt, steps)
    assert losses[-1] < losses[0]
    ema_w, ema_b = np.zeros_like(traj[0][0]), np.zeros_like(traj[0][1])
    for w, b in traj:
        ema_w = ema_w * 0.9 + w * (1 - 0.9)
        ema_b = ema_b * 0.9 + b * (1 - 0.9)
    d = np.float64(np.float32(0.9))  # the decay is held in float32, as Fluid's
    ema_w32 = np.zeros_like(traj[0][0])
    for w, _ in traj:
        ema_w32 = ema_w32 * d + w * (1 - d)
    np.testing.assert_allclose(averaged[0], ema_w32 / (1 - d ** steps), rtol=0, atol=1e-12)
    np.testing.assert_allclose(averaged[0], ema_w / (1 - 0.9 ** steps), rtol=1e-6)


def test_exponential_moving_average_before_any_step_leaves_params():
    def opt(loss):
        fluid.optimizer.SGD(LR).minimize(loss)
        ema = fluid.optimizer.ExponentialMovingAverage(0.99)
        ema.update()
        return ema
    _, _, init, averaged = _train(opt, 0)
    np.testing.assert_array_equal(averaged[0], init[0])


def _model_average_reference(traj, rate, min_w, max_w):
    s1 = s2 = s3 = 0.0
    n_acc = old_n = n_up = 0
    for w, _ in traj:
        n_up += 1
        n_acc += 1
        s1 = s1 + w
        if n_up % 16384 == 0:
            s2, s1 = s2 + s1, 0.0
        if n_acc >= min_w and n_acc >= min(max_w, n_up * rate):
            s3, s1, s2 = s1 + s2, 0.0, 0.0
            old_n, n_acc = n_acc, 0
    return (s1 + s2 + s3) / (n_acc + old_n)


@pytest.mark.parametrize("rate,min_w,max_w,steps", [(0.5, 2, 4, 11), (0.15, 3, 10, 20),
                                                     (1.0, 1, 1, 5), (0.3, 10, 20, 7)])
def test_model_average_matches_numpy(rate, min_w, max_w, steps):
    def opt(loss):
        fluid.optimizer.SGD(LR).minimize(loss)
        return fluid.optimizer.ModelAverage(rate, min_average_window=min_w,
                                            max_average_window=max_w)
    _, traj, _, averaged = _train(opt, steps)
    np.testing.assert_allclose(averaged[0], _model_average_reference(traj, rate, min_w, max_w),
                               rtol=0, atol=1e-12)


def test_model_average_skips_params_marked_off():
    def opt(loss):
        fluid.optimizer.SGD(LR).minimize(loss)
        return fluid.optimizer.ModelAverage(0.5, 2, 4)
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4], dtype="float64")
        pred = fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr(do_model_average=False))
        ma = opt(fluid.layers.mean(pred))
    assert set(ma._state) == {"fc_0.b_0"}
    with pytest.raises(ValueError, match="min_average_window"):
        fluid.optimizer.ModelAverage(0.5, 5, 2)


@pytest.mark.parametrize("alpha,k", [(0.5, 3), (0.8, 1), (0.2, 5)])
def test_lookahead_matches_numpy(alpha, k):
    steps = 11
    losses, traj, init, _ = _train(
        lambda loss: fluid.optimizer.LookaheadOptimizer(fluid.optimizer.SGD(LR), alpha, k)
        .minimize(loss) and None, steps)
    w, b = init
    slow_w, slow_b = w.copy(), b.copy()
    # the scale op's attribute is float32, as Fluid's
    a, ca = np.float64(np.float32(alpha)), np.float64(np.float32(1.0 - alpha))
    for t in range(1, steps + 1):
        gw, gb = _grads(w, b)
        w, b = w - LR * gw, b - LR * gb
        if t % k == 0:
            slow_w = w * a + slow_w * ca
            slow_b = b * a + slow_b * ca
            w, b = slow_w.copy(), slow_b.copy()
        np.testing.assert_allclose(traj[t - 1][0], w, rtol=0, atol=1e-12)
        np.testing.assert_allclose(traj[t - 1][1], b, rtol=0, atol=1e-12)
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="k must be"):
        fluid.optimizer.LookaheadOptimizer(fluid.optimizer.SGD(LR), 0.5, 0)


def test_dpsgd_without_noise_is_clipped_sgd():
    clip = 0.5
    steps = 6
    _, traj, init, _ = _train(
        lambda loss: fluid.optimizer.Dpsgd(LR, clip=clip, batch_size=16.0, sigma=0.0)
        .minimize(loss) and None, steps)
    w, b = init
    for t in range(steps):
        gw, gb = _grads(w, b)
        w = w - LR * gw / max(1.0, np.linalg.norm(gw) / clip)
        b = b - LR * gb / max(1.0, np.linalg.norm(gb) / clip)
        np.testing.assert_allclose(traj[t][0], w, rtol=0, atol=1e-12)
        np.testing.assert_allclose(traj[t][1], b, rtol=0, atol=1e-12)


def test_dpsgd_noise_follows_the_seed():
    def opt(loss):
        fluid.optimizer.Dpsgd(LR, clip=1.0, batch_size=4.0, sigma=0.5).minimize(loss)
    runs = [_train(opt, 4, seed)[1][-1][0] for seed in (3, 3, 4)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    with pytest.raises(ValueError, match="clip"):
        fluid.optimizer.Dpsgd(LR, clip=0.0)


def test_weighted_average():
    avg = fluid.average.WeightedAverage()
    for v, w in [(1.0, 2), (4.0, 1), (np.float32(2.5), 3)]:
        avg.add(value=v, weight=w)
    assert avg.eval() == pytest.approx((2 + 4 + 7.5) / 6)
    avg.reset()
    with pytest.raises(ValueError, match="nothing was added"):
        avg.eval()
    avg.add(np.array([1.0, 3.0]), 1)
    avg.add(np.array([3.0, 5.0]), 3)
    np.testing.assert_allclose(avg.eval(), [2.5, 4.5])
    with pytest.raises(ValueError, match="weight"):
        avg.add(np.array([1.0, 1.0]), -1)
    with pytest.raises(ValueError, match="shape"):
        avg.add(np.array([1.0, 1.0, 1.0]), 1)


def test_chunk_evaluator_against_chunk_eval_counts():
    m = fluid.metrics.ChunkEvaluator()
    assert m.eval() == (0.0, 0.0, 0.0)
    m.update(np.array([10]), np.array([12]), np.array([8]))
    m.update(5, 4, 3)
    p, r, f1 = m.eval()
    assert p == pytest.approx(11 / 15) and r == pytest.approx(11 / 16)
    assert f1 == pytest.approx(2 * p * r / (p + r))
    m.reset()
    assert m.num_infer_chunks == 0
    with pytest.raises(ValueError, match="correct chunks"):
        m.update(2, 5, 3)
    with pytest.raises(ValueError, match="negative"):
        m.update(-1, 5, 0)


def test_require_version():
    fluid.require_version("1.6.0")
    fluid.require_version("1.0", "1.8.0")
    with pytest.raises(Exception, match="needs the Fluid API 1.9"):
        fluid.require_version("1.9")
    with pytest.raises(Exception, match="to 1.7"):
        fluid.require_version("1.0", "1.7")
    with pytest.raises(TypeError, match="min_version"):
        fluid.require_version(1.6)
    with pytest.raises(ValueError, match="'1.x'"):
        fluid.require_version("1.x")


def _numbers(k, n):
    def read():
        for i in range(n):
            yield (k, i)
    return read


def test_multiprocess_reader_yields_every_sample_in_reader_order():
    got = list(fluid.io.multiprocess_reader([_numbers(0, 50), _numbers(1, 30),
                                             _numbers(2, 0)], queue_size=8)())
    assert sorted(got) == sorted([(0, i) for i in range(50)] + [(1, i) for i in range(30)])
    for k in (0, 1):
        assert [i for kk, i in got if kk == k] == sorted(i for kk, i in got if kk == k)


def test_multiprocess_reader_errors_name_the_reader():
    def bad():
        yield (1,)
        raise KeyError("boom")

    def dies():
        yield (1,)
        os._exit(3)
    with pytest.raises(RuntimeError, match=r"readers\[1\] raised KeyError"):
        list(fluid.io.multiprocess_reader([_numbers(0, 3), bad])())
    with pytest.raises(RuntimeError, match=r"readers\[0\] exited with code 3"):
        list(fluid.io.multiprocess_reader([dies])())
    with pytest.raises(ValueError, match="non-empty list"):
        fluid.io.multiprocess_reader([])


def _batches(n):
    rng = np.random.RandomState(0)
    for _ in range(n):
        xb = rng.rand(8, 4).astype("float32")
        yield [xb, (xb @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32"))]


@pytest.mark.parametrize("by_data", [False, True])
def test_py_reader_trains_until_eof(by_data):
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        if by_data:
            xv = fluid.layers.data("x", [4])
            yv = fluid.layers.data("y", [1])
            reader = fluid.layers.create_py_reader_by_data(capacity=4, feed_list=[xv, yv])
        else:
            reader = fluid.layers.py_reader(capacity=4, shapes=[[-1, 4], [-1, 1]],
                                            dtypes=["float32", "float32"])
        x, y = fluid.layers.read_file(reader)
        if by_data:
            assert (x.name, y.name) == ("x", "y")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
        fluid.optimizer.SGD(0.05).minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    reader.decorate_tensor_provider(lambda: _batches(10))
    firsts, counts = [], []
    with fluid.scope_guard(scope):
        exe.run(start)
        for _ in range(3):
            reader.start()
            n = 0
            try:
                while True:
                    v = float(exe.run(main, fetch_list=[loss])[0])
                    if n == 0:
                        firsts.append(v)
                    n += 1
            except fluid.core.EOFException:
                reader.reset()
            counts.append(n)
    assert counts == [10, 10, 10]
    assert firsts[2] < firsts[0]


def test_py_reader_bad_arguments():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="2 dtypes for 1 shapes"):
            fluid.layers.py_reader(4, [[-1, 2]], ["float32", "int64"])
        with pytest.raises(ValueError, match="capacity"):
            fluid.layers.py_reader(0, [[-1, 2]], ["float32"])
        with pytest.raises(TypeError, match="read_file"):
            fluid.layers.read_file(object())


def _ifelse_build(x, c):
    ie = fluid.layers.IfElse(c)
    with ie.true_block():
        xt = ie.input(x)
        ie.output(fluid.layers.fc(xt, 3, param_attr="wt", bias_attr="bt"))
    with ie.false_block():
        xf = ie.input(x)
        ie.output(fluid.layers.tanh(fluid.layers.fc(xf, 3, param_attr="wf", bias_attr="bf")))
    out, = ie()
    return out


@pytest.mark.parametrize("mask", ["mixed", "all_true", "all_false"])
def test_ifelse_forward_and_gradients(mask):
    from op_test import OpTest
    rng = np.random.RandomState(3)
    x = rng.randn(7, 4)
    c = {"mixed": x[:, :1] > 0, "all_true": np.ones((7, 1), bool),
         "all_false": np.zeros((7, 1), bool)}[mask]
    params = {"wt": rng.randn(4, 3), "bt": rng.randn(3), "wf": rng.randn(4, 3),
              "bf": rng.randn(3)}
    t = OpTest(lambda x, c: fluid.layers.reshape(_ifelse_build(x, c), [7, 3]),
               {"x": x, "c": c}, params=params,
               no_grad=("c",))
    expect = np.where(c, x @ params["wt"] + params["bt"], np.tanh(x @ params["wf"] + params["bf"]))
    t.check_forward(expect, rtol=0, atol=1e-12)
    t.check_grad()


def test_ifelse_trains_and_checks_its_use():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="float64")
        c = fluid.layers.greater_than(fluid.layers.slice(x, [1], [0], [1]),
                                      fluid.layers.fill_constant([1], "float64", 0.5))
        ie = fluid.layers.IfElse(c)
        with ie.true_block():
            ie.output(fluid.layers.fc(ie.input(x), 1))
        with ie.false_block():
            ie.output(fluid.layers.fc(ie.input(x), 1))
        pred, = ie()
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.2).minimize(loss)
        with pytest.raises(RuntimeError, match="inside true_block"):
            ie.input(x)
        with pytest.raises(TypeError, match="must be bool"):
            fluid.layers.IfElse(x)
        bad = fluid.layers.IfElse(c)
        with bad.true_block():
            bad.output(bad.input(x))
        with pytest.raises(RuntimeError, match="false_block"):
            bad()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    yv = np.where(X[:, :1] > 0.5, X @ np.ones((4, 1)), -X @ np.ones((4, 1)))
    with fluid.scope_guard(scope):
        exe.run(start)
        losses = [float(exe.run(main, feed={"x": X, "y": yv}, fetch_list=[loss])[0])
                  for _ in range(30)]
    assert losses[-1] < 0.2 * losses[0]


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_weight_norm_param_attr(dim):
    from op_test import OpTest
    rng = np.random.RandomState(5)
    x = rng.randn(5, 4)
    v = rng.randn(4, 3)
    g = rng.rand(1 if dim is None else v.shape[dim]) + 0.5
    t = OpTest(lambda x: fluid.layers.fc(
        x, 3, param_attr=fluid.WeightNormParamAttr(dim=dim, name="wn"), bias_attr=False),
        {"x": x}, params={"wn_v": v, "wn_g": g})
    if dim is None:
        w = g[0] * v / np.sqrt((v ** 2).sum())
    else:
        d = dim % 2
        w = v * np.expand_dims(g / np.sqrt((v ** 2).sum(axis=1 - d)), 1 - d)
    t.check_forward(x @ w, rtol=0, atol=1e-12)
    t.check_grad()


def test_weight_norm_starts_at_v_and_trains():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="float64")
        pred = fluid.layers.fc(x, 1, param_attr=fluid.WeightNormParamAttr(dim=1, name="w"))
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.1).minimize(loss)
        names = {p.name for p in main.all_parameters()}
        with pytest.raises(ValueError, match="dim 3 is out of range"):
            fluid.layers.fc(x, 1, param_attr=fluid.WeightNormParamAttr(dim=3))
    assert {"w_v", "w_g"} <= names and "w" not in names
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(start)
        v = np.array(scope.find_var("w_v").get_tensor())
        g = np.array(scope.find_var("w_g").get_tensor())
        np.testing.assert_allclose(g, np.sqrt((v ** 2).sum(0)), rtol=1e-12)
        losses = [float(exe.run(main, feed={"x": X, "y": Y}, fetch_list=[loss])[0])
                  for _ in range(80)]
    assert losses[-1] < 0.5 * losses[0]


def _write_multislot(tmp_path, files=2, lines=10, seed=0):
    rng = np.random.RandomState(seed)
    paths, samples = [], []
    for f in range(files):
        rows = []
        for _ in range(lines):
            ids = rng.randint(0, 50, rng.randint(1, 5))
            dense = rng.rand(3)
            label = int(ids.sum() % 2)
            rows.append("%d %s 3 %s 1 %d" % (len(ids), " ".join(map(str, ids)),
                                             " ".join("%.6f" % d for d in dense), label))
            samples.append((ids, np.array(["%.6f" % d for d in dense], float), label))
        p = tmp_path / ("part-%d" % f)
        p.write_text("\n".join(rows) + "\n")
        paths.append(str(p))
    return paths, samples


def _ctr_program():
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 9
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        ids = fluid.layers.data("ids", [1], dtype="int64", lod_level=1)
        dense = fluid.layers.data("dense", [3], dtype="float32")
        label = fluid.layers.data("label", [1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[50, 4])
        pooled = fluid.layers.sequence_pool(emb, "sum")
        logits = fluid.layers.fc(fluid.layers.concat([pooled, dense], axis=1), 2)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, start, [ids, dense, label], loss


@pytest.mark.parametrize("kind", ["QueueDataset", "InMemoryDataset"])
def test_train_from_dataset_equals_feeding_the_batches(tmp_path, kind, capsys):
    paths, samples = _write_multislot(tmp_path)
    main, start, slots, loss = _ctr_program()
    ds = fluid.DatasetFactory().create_dataset(kind)
    ds.set_use_var(slots)
    ds.set_batch_size(4)
    ds.set_thread(2)
    ds.set_filelist(paths)
    if kind == "InMemoryDataset":
        ds.load_into_memory()
        assert ds.get_memory_data_size() == len(samples)
    exe = fluid.Executor(fluid.CPUPlace())
    s1, s2 = fluid.Scope(), fluid.Scope()
    with fluid.scope_guard(s1):
        exe.run(start)
        for _ in range(2):
            assert exe.train_from_dataset(main, ds, fetch_list=[loss], fetch_info=["loss"],
                                          print_period=2) == 5
    assert "train_from_dataset step 4: loss" in capsys.readouterr().out
    feeder = fluid.DataFeeder(slots)
    with fluid.scope_guard(s2):
        exe.run(start)
        for _ in range(2):
            for b in range(0, len(samples), 4):
                batch = [(ids.reshape(-1, 1), dense.astype("float32"), [lab])
                         for ids, dense, lab in samples[b:b + 4]]
                exe.run(main, feed=feeder.feed(batch), fetch_list=[loss])
    for name in ("fc_0.w_0", "embedding_0.w_0"):
        np.testing.assert_array_equal(np.array(s1.find_var(name).get_tensor()),
                                      np.array(s2.find_var(name).get_tensor()))


def test_in_memory_dataset_shuffle_is_seeded(tmp_path):
    paths, samples = _write_multislot(tmp_path, files=1, lines=30)
    main, start, slots, loss = _ctr_program()
    orders = []
    for _ in range(2):
        ds = fluid.DatasetFactory().create_dataset("InMemoryDataset")
        ds.set_use_var(slots)
        ds.set_filelist(paths)
        ds.set_shuffle_seed(5)
        ds.preload_into_memory()
        ds.wait_preload_done()
        ds.local_shuffle()
        orders.append([tuple(s[0].ravel()) for s in ds._samples])
    assert orders[0] == orders[1]
    assert orders[0] != [tuple(s[0]) for s in samples]
    assert sorted(orders[0]) == sorted(tuple(s[0]) for s in samples)


def test_dataset_errors_name_the_file_and_line(tmp_path):
    main, start, slots, loss = _ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())
    bad = tmp_path / "bad"
    bad.write_text("2 1 2 3 0.1 0.2 0.3 1 0\n2 1 2 2 0.1 0.2 1 0\n")
    ds = fluid.DatasetFactory().create_dataset("QueueDataset")
    ds.set_use_var(slots)
    ds.set_filelist([str(bad)])
    with fluid.scope_guard(fluid.Scope()):
        exe.run(start)
        with pytest.raises(ValueError, match=r"bad line 2, slot 'dense': 2 values for a dense "
                                             r"slot of 3"):
            exe.train_from_dataset(main, ds)
        ds.set_pipe_command("exit 7")
        with pytest.raises(RuntimeError, match="exited with 7"):
            exe.train_from_dataset(main, ds)
    with pytest.raises(ValueError, match="unknown dataset"):
        fluid.DatasetFactory().create_dataset("Nope")
    with pytest.raises(RuntimeError, match="set_filelist"):
        empty = fluid.DatasetFactory().create_dataset()
        empty.set_use_var(slots)
        list(empty._feeds())
    with pytest.raises(RuntimeError, match="load_into_memory"):
        mem = fluid.DatasetFactory().create_dataset("InMemoryDataset")
        mem.local_shuffle()


@pytest.mark.parametrize("fmt", ["loom", "npy"])
def test_layers_load_reads_at_run_time(tmp_path, fmt):
    value = np.arange(12, dtype="float64").reshape(3, 4) / 7
    path = str(tmp_path / ("t.npy" if fmt == "npy" else "t.tensor"))
    if fmt == "npy":
        np.save(path, value)
    else:
        t = fluid.core.Tensor()
        t.set(value, fluid.CPUPlace())
        fluid.core.save_tensor(t, path)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        out = fluid.layers.create_tensor("float64")
        fluid.layers.load(out, path)
        doubled = fluid.layers.scale(out, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    got, twice = exe.run(main, fetch_list=[out, doubled])
    np.testing.assert_array_equal(got, value)
    np.testing.assert_allclose(twice, 2 * value)
    bad = fluid.Program()
    with fluid.program_guard(bad, fluid.Program()):
        fluid.layers.load(fluid.layers.create_tensor("float32"), str(tmp_path / "missing"))
    with pytest.raises(Exception, match="cannot load .*missing"):
        exe.run(bad)


def _np_lstm(x, h0, c0, w, b, reverse):
    """x [batch, T, in]; gates [i, j, f, o] of [x, h] w + b, no forget bias."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h, c = h0, c0
    outs = [None] * x.shape[1]
    for t in (reversed(range(x.shape[1])) if reverse else range(x.shape[1])):
        g = np.concatenate([x[:, t], h], 1) @ w + b
        i, j, f, o = np.split(g, 4, 1)
        c = c * sig(f) + sig(i) * np.tanh(j)
        h = np.tanh(c) * sig(o)
        outs[t] = h
    return np.stack(outs, 1), h, c


@pytest.mark.parametrize("layers,bidirec", [(1, False), (2, True)])
def test_lstm_matches_numpy_and_gradients(layers, bidirec):
    from op_test import OpTest
    rng = np.random.RandomState(11)
    batch, T, ins, hid = 2, 3, 3, 2
    dirs = 2 if bidirec else 1
    x = rng.randn(batch, T, ins)
    h0 = rng.randn(layers * dirs, batch, hid) * 0.5
    c0 = rng.randn(layers * dirs, batch, hid) * 0.5
    params, weights = {}, {}
    for layer in range(layers):
        width = (ins if layer == 0 else hid * dirs) + hid
        for d in range(dirs):
            tag = "l%d_%s" % (layer, "bw" if d else "fw")
            weights[tag] = (rng.randn(width, 4 * hid) * 0.5, rng.randn(4 * hid) * 0.5)
            params["%s.w" % tag], params["%s.b" % tag] = weights[tag]

    def build(x, h0, c0):
        out, h, c = fluid.layers.lstm(x, h0, c0, T, hid, layers, is_bidirec=bidirec,
                                      name="lstm")
        return [out, h, c]
    t = OpTest(build, {"x": x, "h0": h0, "c0": c0}, params=params)
    inp, hs, cs = x, [], []
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            w, b = weights["l%d_%s" % (layer, "bw" if d else "fw")]
            o, h, c = _np_lstm(inp, h0[k], c0[k], w, b, reverse=bool(d))
            outs.append(o)
            hs.append(h)
            cs.append(c)
        inp = np.concatenate(outs, 2)
    t.check_forward([inp, np.stack(hs), np.stack(cs)], rtol=0, atol=1e-12)
    t.check_grad()


def test_lstm_language_model_trains():
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 3
    batch, T, vocab = 4, 6, 12
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        words = fluid.layers.data("w", [batch, T], dtype="int64", append_batch_size=False)
        nxt = fluid.layers.data("n", [batch * T, 1], dtype="int64", append_batch_size=False)
        emb = fluid.embedding(words, size=[vocab, 8])
        h0 = fluid.layers.fill_constant([2, batch, 16], "float32", 0.0)
        out, _, _ = fluid.layers.lstm(emb, h0, h0, T, 16, 2, dropout_prob=0.1)
        logits = fluid.layers.fc(fluid.layers.reshape(out, [-1, 16]), vocab)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, nxt))
        fluid.optimizer.Adam(0.02).minimize(loss)
        with pytest.raises(ValueError, match="init_h must be"):
            fluid.layers.lstm(emb, fluid.layers.fill_constant([3, batch, 16], "float32", 0.0),
                              h0, T, 16, 2)
    seq = np.arange(batch * (T + 1)).reshape(batch, T + 1) % vocab
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(start)
        losses = [float(exe.run(main, feed={"w": seq[:, :T], "n": seq[:, 1:].reshape(-1, 1)},
                                fetch_list=[loss])[0]) for _ in range(40)]
    assert losses[-1] < 0.3 * losses[0]


def _np_lstmp(x, lengths, w, w_proj, b, reverse, peep, h0=None, c0=None, cell_clip=None,
              proj_clip=None):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    d, p = w_proj.shape
    projs, cells = np.zeros((len(x), p)), np.zeros((len(x), d))
    start = 0
    for s, n in enumerate(lengths):
        r = np.tanh(h0[s] @ w_proj) if h0 is not None else np.zeros(p)
        c = c0[s] if c0 is not None else np.zeros(d)
        rows = range(start, start + n)
        for t in (reversed(rows) if reverse else rows):
            g = x[t] + r @ w + b[0, :4 * d]
            cand, i, f, o = np.split(g, 4)
            if peep:
                i = i + b[0, 4 * d:5 * d] * c
                f = f + b[0, 5 * d:6 * d] * c
            c = sig(f) * c + sig(i) * np.tanh(cand)
            if cell_clip is not None:
                c = np.clip(c, -cell_clip, cell_clip)
            if peep:
                o = o + b[0, 6 * d:7 * d] * c
            h = sig(o) * np.tanh(c)
            r = np.tanh(h @ w_proj)
            if proj_clip is not None:
                r = np.clip(r, -proj_clip, proj_clip)
            projs[t], cells[t] = r, c
        start += n
    return projs, cells


@pytest.mark.parametrize("reverse,peep,init,clips", [(False, True, False, None),
                                                     (True, True, True, None),
                                                     (False, False, True, (0.5, 0.3))])
def test_dynamic_lstmp_matches_numpy_and_gradients(reverse, peep, init, clips):
    rng = np.random.RandomState(2)
    d, p, lengths = 2, 3, [3, 1, 2]
    x = rng.randn(sum(lengths), 4 * d)
    w, w_proj = rng.randn(p, 4 * d) * 0.5, rng.randn(d, p) * 0.5
    b = rng.randn(1, (7 if peep else 4) * d) * 0.5
    h0 = rng.randn(3, d) * 0.5 if init else None
    c0 = rng.randn(3, d) * 0.5 if init else None
    cell_clip, proj_clip = clips or (None, None)
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        xv = fluid.data("x", [None, 4 * d], "float64", lod_level=1)
        xv.stop_gradient = False
        extra = {}
        if init:
            extra = {"h_0": fluid.data("h0", [3, d], "float64"),
                     "c_0": fluid.data("c0", [3, d], "float64")}
        proj, cell = fluid.layers.dynamic_lstmp(
            xv, 4 * d, p, param_attr="lstmp_w", bias_attr="lstmp_b", use_peepholes=peep,
            is_reverse=reverse, dtype="float64", cell_clip=cell_clip, proj_clip=proj_clip,
            **extra)
        wv = fluid.data("wsum", [None, p], "float64")
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(proj, wv))
        fluid.backward.append_backward(loss)
    assert {p_.name for p_ in main.all_parameters()} == {"lstmp_w", "lstmp_w_proj", "lstmp_b"}
    wp_name = "lstmp_w_proj"
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    weights = rng.uniform(0.5, 1.5, (sum(lengths), p))
    with fluid.scope_guard(scope):
        exe.run(start)
        for n, v in (("lstmp_w", w), (wp_name, w_proj), ("lstmp_b", b)):
            scope.find_var(n).get_tensor().set(v, fluid.CPUPlace())

        def run(xa, fetch):
            feed = {"x": fluid.create_lod_tensor(xa, [lengths], fluid.CPUPlace()),
                    "wsum": weights}
            if init:
                feed.update(h0=h0, c0=c0)
            return exe.run(main, feed=feed, fetch_list=fetch)
        got_p, got_c, gx = run(x, [proj, cell, "x@GRAD"])
        ref_p, ref_c = _np_lstmp(x, lengths, w, w_proj, b, reverse, peep, h0, c0, cell_clip,
                                 proj_clip)
        np.testing.assert_allclose(got_p, ref_p, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got_c, ref_c, rtol=0, atol=1e-12)
        numeric = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            vals = []
            for e in (1e-6, -1e-6):
                xp = x.copy()
                xp[idx] += e
                vals.append(float(run(xp, [loss])[0]))
            numeric[idx] = (vals[0] - vals[1]) / 2e-6
        np.testing.assert_allclose(gx, numeric, rtol=1e-6, atol=1e-8)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        xv = fluid.data("x", [None, 8], "float32", lod_level=1)
        with pytest.raises(ValueError, match="proj_activation 'softmax'"):
            fluid.layers.dynamic_lstmp(xv, 8, 3, proj_activation="softmax")
        with pytest.raises(ValueError, match="size must be 4"):
            fluid.layers.dynamic_lstmp(xv, 6, 3)


def test_dynamic_lstmp_trains():
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 5
    rng = np.random.RandomState(0)
    lengths = [4, 2, 5, 3]
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, 1], "int64", lod_level=1)
        y = fluid.data("y", [None, 1], "float32")
        emb = fluid.embedding(ids, size=[20, 16])
        proj, _ = fluid.layers.dynamic_lstmp(fluid.layers.fc(emb, 16), 16, 6)
        last = fluid.layers.sequence_last_step(proj)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(last, 1), y))
        fluid.optimizer.Adam(0.05).minimize(loss)
    seqs = rng.randint(0, 20, (sum(lengths), 1)).astype("int64")
    target = np.array([[1.0], [-1.0], [0.5], [0.0]], "float32")
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(start)
        losses = [float(exe.run(main, feed={
            "ids": fluid.create_lod_tensor(seqs, [lengths], fluid.CPUPlace()), "y": target},
            fetch_list=[loss])[0]) for _ in range(30)]
    assert losses[-1] < 0.1 * losses[0]


def test_static_mode_names():
    assert fluid.in_dygraph_mode() is False
    fluid.disable_dygraph()
    fluid.disable_imperative()
    assert fluid.in_dygraph_mode() is False
    assert not hasattr(fluid, "enable_dygraph")
    avg = fluid.WeightedAverage()
    avg.add(2.0, 1)
    assert avg.eval() == 2.0


def test_checkpoints_on_a_schedule_resume_exactly(tmp_path):
    ckpt = str(tmp_path / "ckpt")

    def run(first, last, resume):
        main, start, loss, _ = _linear(lambda l: fluid.optimizer.Adam(0.1).minimize(l) and None)
        scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
        losses = {}
        with fluid.scope_guard(scope):
            exe.run(start)
            step = fluid.io.load_latest_checkpoint(exe, ckpt, main) if resume else 0
            assert step == first
            for s in range(step + 1, last + 1):
                losses[s] = float(exe.run(main, feed={"x": X, "y": Y}, fetch_list=[loss])[0])
                if s % 3 == 0:
                    fluid.io.save_checkpoint(exe, ckpt, s, main, max_num_checkpoints=2)
        return losses
    whole = run(0, 12, resume=False)
    assert [s for s, _ in fluid.io.checkpoints(ckpt)] == [9, 12]
    import shutil
    shutil.rmtree(ckpt)
    run(0, 7, resume=False)  # stopped after step 7: checkpoints of steps 3 and 6
    os.makedirs(os.path.join(ckpt, "step-9"))  # a save that died: no CHECKPOINT
    resumed = run(6, 12, resume=True)
    for s in range(7, 13):
        assert resumed[s] == whole[s], (s, resumed[s], whole[s])
    with pytest.raises(ValueError, match="step must be a positive int"):
        fluid.io.save_checkpoint(fluid.Executor(fluid.CPUPlace()), ckpt, 0)


def test_checkpoint_dir_defaults_to_the_jobs(tmp_path, monkeypatch):
    main, start, loss, _ = _linear(lambda l: fluid.optimizer.SGD(0.1).minimize(l) and None)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(start)
        monkeypatch.delenv("LOOM_CHECKPOINT_DIR", raising=False)
        with pytest.raises(ValueError, match="no checkpoint directory"):
            fluid.io.save_checkpoint(exe, None, 1, main)
        monkeypatch.setenv("LOOM_CHECKPOINT_DIR", str(tmp_path / "job"))
        path = fluid.io.save_checkpoint(exe, None, 5, main)
        assert path == str(tmp_path / "job" / "step-5")
        assert fluid.io.load_latest_checkpoint(exe, main_program=main) == 5
