"""Loom used carelessly from Python: every mistake below ends in the exact error class with a
message naming what is wrong, and the process survives (cases that used to kill it run in a
child process, which must exit normally)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loom as fluid
from loom import core


def run_program(build, feed=None, fetch=None, startup=True):
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        out = build()
    exe = fluid.Executor(fluid.CPUPlace())
    if startup:
        exe.run(start)
    return exe.run(main, feed=feed or {}, fetch_list=[out] if fetch is None else fetch)


def survives(code, env=None):
    """Runs code in a fresh interpreter; returns its stdout (asserting a normal exit)."""
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=full)
    assert r.returncode == 0, "the process died (%d): %s" % (r.returncode, r.stderr[-2000:])
    return r.stdout


# ---- integer ops never trap -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_by_zero_is_an_error(dtype):
    def build():
        a = fluid.layers.data("a", [2], dtype=dtype)
        b = fluid.layers.data("b", [2], dtype=dtype)
        return fluid.layers.elementwise_div(a, b)
    feed = {"a": np.array([[7, 8]], dtype), "b": np.array([[1, 0]], dtype)}
    with pytest.raises(core.InvalidArgumentError, match="integer division by zero"):
        run_program(build, feed)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_ops_that_trap_in_hardware_have_defined_results(dtype):
    lo = np.iinfo(dtype).min

    def build():
        a = fluid.layers.data("a", [3], dtype=dtype)
        b = fluid.layers.data("b", [3], dtype=dtype)
        return fluid.layers.elementwise_div(a, b)
    got, = run_program(build, {"a": np.array([[lo, 7, -7]], dtype),
                              "b": np.array([[-1, -1, 2]], dtype)})
    # INT_MIN / -1 wraps (as numpy's); the others truncate toward zero (as C and Paddle).
    assert got.tolist() == [[lo, -7, -3]]


def test_integer_pow_is_exact_and_refuses_negative_exponents():
    def build():
        a = fluid.layers.data("a", [2], dtype="int64")
        b = fluid.layers.data("b", [2], dtype="int64")
        return fluid.layers.elementwise_pow(a, b)
    got, = run_program(build, {"a": np.array([[3, 2]], "int64"), "b": np.array([[39, 62]], "int64")})
    assert got.tolist() == [[3 ** 39, 2 ** 62]]
    with pytest.raises(core.InvalidArgumentError, match="negative exponent"):
        run_program(build, {"a": np.array([[3, 2]], "int64"), "b": np.array([[1, -1]], "int64")})


# ---- sizes the machine cannot hold ----------------------------------------------------------

def test_element_counts_that_overflow_are_an_error():
    def build():
        c = fluid.layers.fill_constant([2 ** 32, 2 ** 32], "float32", 1.0)
        return fluid.layers.reduce_sum(c)
    with pytest.raises(core.InvalidArgumentError, match="more than 2\\^63 elements"):
        run_program(build, startup=False)


def test_a_layer_too_large_for_memory_is_resource_exhausted():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        fluid.layers.fc(x, 10 ** 11)  # a 1.6 TB weight
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(core.ResourceExhaustedError, match="out of host memory") as e:
        exe.run(start)
    assert isinstance(e.value, MemoryError)
    assert "fc_0.w_0" in str(e.value), str(e.value)


def test_the_host_memory_limit_applies_and_the_process_goes_on():
    out = survives("""
        import numpy as np, loom as fluid
        from loom import core
        huge, sane = fluid.Program(), fluid.Program()
        with fluid.program_guard(huge):
            big = fluid.layers.fill_constant([64, 1024, 1024], "float32", 1.0)  # 256 MiB
        with fluid.program_guard(sane):
            small = fluid.layers.fill_constant([2], "float32", 3.0)
        exe = fluid.Executor(fluid.CPUPlace())
        try:
            exe.run(huge, fetch_list=[big])
        except core.ResourceExhaustedError as e:
            print("refused:", "fill_constant" in str(e), "LOOM_HOST_MEMORY_MB" in str(e))
        print("then:", exe.run(sane, fetch_list=[small])[0].tolist())
    """, env={"LOOM_HOST_MEMORY_MB": "128"})
    assert "refused: True True" in out, out
    assert "then: [3.0, 3.0]" in out, out


# ---- place counts are checked where they are given ------------------------------------------

@pytest.mark.parametrize("n", [0, 65, 1000])
def test_place_counts_outside_the_group_limit(n):
    with pytest.raises(ValueError, match="1..64"):
        fluid.cpu_places(n)


def test_threads_that_cannot_be_started_are_resource_exhausted():
    out = survives("""
        import resource
        import numpy as np, loom as fluid
        from loom import core
        main, start = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, start), fluid.unique_name.guard():
            x = fluid.layers.data("x", [4])
            loss = fluid.layers.mean(fluid.layers.fc(x, 3))
            fluid.optimizer.SGD(0.1).minimize(loss)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(start)
        # Little address space left: 64 places' threads (8 MiB stacks) cannot all start.
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + 96 * 2 ** 20, vm + 96 * 2 ** 20))
        comp = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(64))
        try:
            exe.run(comp, feed={"x": np.ones([64, 4], "float32")}, fetch_list=[loss])
            print("ran")
        except core.ResourceExhaustedError as e:
            print("refused:", e)
        print("alive")
    """)
    assert "refused:" in out and "alive" in out, out


def test_cpu_num_that_is_not_a_number(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "four")
    with pytest.raises(ValueError, match="CPU_NUM"):
        fluid.cpu_places()


def test_with_data_parallel_refuses_too_many_places():
    main = fluid.Program()
    with pytest.raises(ValueError, match="1..64"):
        fluid.CompiledProgram(main).with_data_parallel(places=[fluid.CPUPlace()] * 65)
    with pytest.raises(ValueError, match="1..64"):
        fluid.CompiledProgram(main).with_data_parallel(places=[])


def test_transpiling_for_more_ranks_than_a_group_holds():
    with pytest.raises(core.InvalidArgumentError, match="world size 1000 is outside 1..64"):
        core.transpile_data_parallel(core.ProgramDesc(), core.ProgramDesc(), 1000)


# ---- paths and files ------------------------------------------------------------------------

def _trained_scope():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3])
        y = fluid.layers.fc(x, 2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(start)
    return main, exe, y


def test_an_empty_path_is_an_error_everywhere():
    main, exe, y = _trained_scope()
    with pytest.raises(core.InvalidArgumentError, match="empty"):
        fluid.io.save_params(exe, "", main)
    with pytest.raises(core.InvalidArgumentError, match="empty"):
        fluid.io.load_params(exe, "", main)
    with pytest.raises(ValueError, match="empty"):
        fluid.io.save_inference_model("", ["x"], [y], exe, main)


def test_save_inference_model_names_feeds_of_the_program(tmp_path):
    main, exe, y = _trained_scope()
    with pytest.raises(ValueError, match="feed 'not_x' is not a variable"):
        fluid.io.save_inference_model(str(tmp_path / "m"), ["not_x"], [y], exe, main)
    assert not (tmp_path / "m").exists()


def test_a_checkpoint_is_loaded_whole_or_not_at_all(tmp_path):
    main, exe, y = _trained_scope()
    w = main.global_block().all_parameters()[0].name
    scope = fluid.global_scope()
    fluid.io.save_params(exe, str(tmp_path / "a"), main)
    before = np.array(scope.find_var(w).get_tensor()).copy()
    scope.find_var(w).get_tensor().set(before + 1, fluid.CPUPlace())
    fluid.io.save_params(exe, str(tmp_path / "b"), main)
    # One file of the newer save copied over the older one: refused, the scope untouched.
    (tmp_path / "a" / w).write_bytes((tmp_path / "b" / w).read_bytes())
    with pytest.raises(core.CorruptionError, match="mixes files of two saves"):
        fluid.io.load_params(exe, str(tmp_path / "a"), main)
    np.testing.assert_array_equal(np.array(scope.find_var(w).get_tensor()), before + 1)
    # A save interrupted before its CHECKPOINT was written.
    (tmp_path / "b" / "CHECKPOINT").unlink()
    with pytest.raises(core.FailedPreconditionError, match="interrupted"):
        fluid.io.load_params(exe, str(tmp_path / "b"), main)


# ---- values kept exactly, or refused ----------------------------------------------------------

def test_fill_constant_keeps_integer_values_exactly():
    def fill(dtype, value):
        return run_program(lambda: fluid.layers.fill_constant([2], dtype, value), startup=False)[0]
    assert fill("int64", 2 ** 62 + 1).tolist() == [2 ** 62 + 1] * 2
    assert fill("int64", -2 ** 63).tolist() == [-2 ** 63] * 2
    assert fill("float64", 0.1).tolist() == [0.1, 0.1]
    for dtype, value in [("int32", 2 ** 40), ("int64", float("nan")), ("int64", 1.5),
                         ("int64", 2 ** 63), ("bool", 2)]:
        with pytest.raises(ValueError, match="fill value"):
            fill(dtype, value)
    # A program built without the Python layer: the op itself refuses it.
    main = fluid.Program()
    v = main.global_block().create_var(name="v", shape=[1], dtype="int32")
    with pytest.raises(core.InvalidArgumentError, match="does not fit int32"):
        main.global_block().append_op("fill_constant", outputs={"Out": v},
                                      attrs={"shape": [1], "value": 1e10,
                                             "dtype": int(core.DataType.INT32)})


@pytest.mark.parametrize("dtype", [">f4", ">f8", ">i4", ">i8"])
def test_big_endian_arrays_are_read_by_value(dtype):
    data = np.arange(6).reshape(2, 3).astype(dtype)
    main = fluid.Program()
    with fluid.program_guard(main):
        x = fluid.layers.data("x", [3], dtype=np.dtype(dtype).newbyteorder("=").name)
        y = fluid.layers.scale(x, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    got, = exe.run(main, feed={"x": data}, fetch_list=[y])
    np.testing.assert_array_equal(got, data.astype(data.dtype.newbyteorder("=")) * 2)
    t = core.Tensor()
    t.set(data, fluid.CPUPlace())
    np.testing.assert_array_equal(np.array(t), data)


def test_a_scope_holding_another_programs_parameters_is_refused():
    def net(width):
        main, start = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, start), fluid.unique_name.guard():
            x = fluid.layers.data("x", [3])
            y = fluid.layers.fc(x, width)
        return main, start, y
    main5, start5, _ = net(5)
    main3, _, y3 = net(3)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(start5, scope=scope)
    with pytest.raises(core.InvalidArgumentError, match="fc_0.w_0.*declares float32 \\[3, 3\\]"):
        exe.run(main3, feed={"x": np.ones([2, 3], "float32")}, fetch_list=[y3], scope=scope)


# ---- float64 programs train with every optimizer --------------------------------------------

def _f64_net(opt):
    main, start = fluid.Program(), fluid.Program()
    start.random_seed = 11  # the same initial parameters in every build
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3], dtype="float64")
        loss = fluid.layers.mean(fluid.layers.fc(x, 2, act="tanh"))
        {"sgd": fluid.optimizer.SGD(0.1), "momentum": fluid.optimizer.Momentum(0.1, 0.9),
         "adam": fluid.optimizer.Adam(0.01)}[opt].minimize(loss)
    return main, start, loss


@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
def test_float64_programs_train_with_every_optimizer(opt):
    # In float64, data parallelism is exact but for the order of additions: each place's
    # gradient is scaled by its share of the batch in float64 (sample_weight), so 2 and 3 places
    # agree with one to a few ulps (measured: at most 2.3e-16 relative).
    data = np.random.RandomState(0).rand(6, 3)
    results = []
    for places in (None, 2, 3):
        main, start, loss = _f64_net(opt)
        scope = core.Scope()
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(start, scope=scope)
        prog = main if places is None else fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(places))
        for _ in range(3):
            exe.run(prog, feed={"x": data}, fetch_list=[loss], scope=scope)
        w = [p.name for p in main.global_block().all_parameters()]
        results.append([np.array(scope.find_var(n).get_tensor()) for n in w])
        assert all(r.dtype == np.float64 for r in results[-1])
    for many in results[1:]:
        for one, got in zip(results[0], many):
            np.testing.assert_allclose(got, one, rtol=1e-14, atol=1e-15)


def test_an_optimizer_input_of_another_dtype_is_a_build_error():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3], dtype="float64")
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        lr = fluid.layers.create_global_var([1], 0.1, "float32", persistable=True)
        with pytest.raises(core.InvalidArgumentError, match="LearningRate.*float32 but Param is "
                                                            "float64"):
            fluid.optimizer.Momentum(lr, 0.9).minimize(loss)


# ---- data parallelism: the first cause, at once; then recovery --------------------------------

def _dp_net():
    main, start = fluid.Program(), fluid.Program()
    start.random_seed = 5
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        y = fluid.layers.data("y", [1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(x, 3), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, start, loss


def test_a_failing_place_reports_its_own_error_and_the_next_run_recovers():
    main, start, loss = _dp_net()
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(start, scope=scope)
    bs = fluid.BuildStrategy()
    bs.collective_timeout_ms = 60000  # a peer waiting for its timeout would take a minute
    comp = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(3), build_strategy=bs)
    x = np.random.RandomState(1).rand(6, 4).astype("float32")
    y = np.zeros([6, 1], "int64")
    exe.run(comp, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    y[5] = 7  # the last place's share
    with pytest.raises(core.InvalidArgumentError, match="rank 2: .*label 7.*out of range"):
        exe.run(comp, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    y[5] = 0
    out, = exe.run(comp, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    assert np.all(np.isfinite(out))


def test_feeds_are_checked_before_any_place_runs_and_non_batch_feeds_go_whole():
    main, start, loss = _dp_net()
    with fluid.program_guard(main, start):
        flag = fluid.layers.data("flag", [1], append_batch_size=False)
        fluid.layers.scale(flag, 2.0)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(start, scope=scope)
    comp = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    x = np.random.rand(4, 4).astype("float32")
    with pytest.raises(core.InvalidArgumentError, match="different numbers of samples"):
        exe.run(comp, feed={"x": x, "y": np.zeros([3, 1], "int64"),
                            "flag": np.ones([1], "float32")}, fetch_list=[loss], scope=scope)
    # The shape-[1] flag is given to both places whole (it has no batch dim to split).
    exe.run(comp, feed={"x": x, "y": np.zeros([4, 1], "int64"), "flag": np.ones([1], "float32")},
            fetch_list=[loss], scope=scope)


@pytest.mark.parametrize("how", ["startup", "load_params"])
def test_places_take_over_parameters_changed_outside_their_runs(tmp_path, how):
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 3))
        fluid.optimizer.SGD(0.5).minimize(loss)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(start, scope=scope)
    saved = str(tmp_path / "p")
    with fluid.scope_guard(scope):
        fluid.io.save_params(exe, saved, main)
    comp = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    data = np.random.RandomState(2).rand(4, 4).astype("float32")
    for _ in range(3):
        exe.run(comp, feed={"x": data}, fetch_list=[loss], scope=scope)
    # Place 0's parameters replaced behind the compiled program's back.
    if how == "startup":
        exe.run(start, scope=scope)
    else:
        with fluid.scope_guard(scope):
            fluid.io.load_params(exe, saved, main)
    exe.run(comp, feed={"x": data}, fetch_list=[loss], scope=scope)
    places = comp.local_scopes(scope)
    for p in main.global_block().all_parameters():
        np.testing.assert_array_equal(np.array(places[0].find_var(p.name).get_tensor()),
                                      np.array(places[1].find_var(p.name).get_tensor()))


# ---- determinism --------------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_numbers_on_every_run():
    code = """
        import hashlib, os, sys
        sys.path.insert(0, %r)
        import test_data_parallel as dp
        data, init, want = dp.ref_for("cond", "adam", 12)
        h = hashlib.sha1()
        for places in (1, 3):
            ranks, _ = dp.data_parallel("cond", "adam", data, init, places, "allreduce", "auto",
                                        True)
            for name in sorted(ranks[0]):
                h.update(ranks[0][name].tobytes())
        print(h.hexdigest())
    """ % os.path.dirname(os.path.abspath(__file__))
    runs = {survives(code).strip() for _ in range(2)}
    assert len(runs) == 1, runs


def test_integer_scale_takes_integers_and_wraps_instead_of_overflowing():
    def scaled(value, scale, bias=0.0, dtype="int32"):
        def build():
            x = fluid.layers.data("x", [1], dtype=dtype)
            return fluid.layers.scale(x, scale, bias)
        return run_program(build, {"x": np.array([[value]], dtype)}, startup=False)[0]
    assert scaled(7, 3.0, 1.0).tolist() == [[22]]
    lo = np.iinfo("int32").min
    assert scaled(2 ** 30, 4.0).tolist() == [[0]]  # wraps, as numpy's int32 arithmetic
    assert scaled(lo, -1.0).tolist() == [[lo]]
    with pytest.raises(core.InvalidArgumentError, match="scale = 0.5 cannot scale an int32"):
        scaled(7, 0.5)
