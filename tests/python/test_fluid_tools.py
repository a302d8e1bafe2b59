"""Fluid's small tools: Program.num_blocks, fluid.core.CPUPlace, install_check.run_check,
fluid.profiler, set_flags / get_flags, and feeds whose batch sizes differ."""
import json
import os

import numpy as np
import pytest

import loom as fluid
from loom import core


def net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.layers.data("img", [6])
        label = fluid.layers.data("label", [1], dtype="int64")
        prob = fluid.layers.fc(fluid.layers.fc(img, 8, act="relu"), 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        acc = fluid.layers.accuracy(prob, label)
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss, acc


def feed(rows_img=8, rows_label=8):
    rng = np.random.RandomState(0)
    return {"img": rng.rand(rows_img, 6).astype("float32"),
            "label": rng.randint(0, 3, (rows_label, 1)).astype("int64")}


def test_num_blocks_is_a_property_and_still_callable():
    main, _, _, _ = net()
    assert main.num_blocks == 1
    assert main.num_blocks() == 1
    assert main.num_blocks + 1 == 2 and isinstance(main.num_blocks, int)


def test_core_places():
    assert fluid.core.CPUPlace() == fluid.CPUPlace()
    assert fluid.core.CPUPlace().is_cpu_place()


def test_run_check_prints_fluid_like_lines(capsys):
    fluid.install_check.run_check()
    out = capsys.readouterr().out
    assert "works well on SINGLE GPU or CPU" in out
    assert "works well on MULTIPLE GPU or CPU" in out
    assert "installed successfully" in out


def test_run_check_raises_naming_the_failure(monkeypatch):
    from loom import install_check
    monkeypatch.setattr(install_check, "_data", lambda: {
        "x": np.full((8, 4), np.nan, "float32"), "y": np.zeros((8, 1), "float32")})
    with pytest.raises(RuntimeError, match="cpu.*not finite"):
        install_check.run_check()


def test_profiler_prints_the_per_op_table_and_writes_a_trace(tmp_path, capsys):
    main, startup, loss, _ = net()
    exe = fluid.Executor(fluid.CPUPlace())
    path = str(tmp_path / "profile")
    with fluid.scope_guard(core.Scope()):
        exe.run(startup)
        exe.run(main, feed=feed(), fetch_list=[loss])  # not recorded
        with fluid.profiler.profiler("CPU", "total", path):
            for _ in range(3):
                exe.run(main, feed=feed(), fetch_list=[loss])
        exe.run(main, feed=feed(), fetch_list=[loss])  # not recorded either
    out = capsys.readouterr().out
    assert "Profiling Report" in out and "Place: CPU" in out and "Time unit: ms" in out
    lines = out.splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("Event"))
    assert lines[header].split() == ["Event", "Calls", "Total", "Min.", "Max.", "Ave.", "Ratio."]
    rows = {}
    for line in lines[header + 1:]:
        if not line.strip():
            break
        f = line.split()
        rows[f[0]] = (int(f[1]), float(f[2]), float(f[6]))
    ops = [op.type for op in main.global_block().ops]
    for t in set(ops):
        assert rows[t][0] == 3 * ops.count(t), (t, rows[t])
    totals = [v[1] for v in rows.values()]
    assert totals == sorted(totals, reverse=True)
    assert abs(sum(v[2] for v in rows.values()) - 1.0) < 0.01
    trace = json.load(open(path))
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "X") == 3 * len(ops)


def test_profiler_records_every_place_of_a_compiled_program(tmp_path, capsys):
    main, startup, loss, _ = net()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(core.Scope()):
        exe.run(startup)
        compiled = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(2))
        exe.run(compiled, feed=feed(), fetch_list=[loss])
        fluid.profiler.start_profiler("All")
        exe.run(compiled, feed=feed(), fetch_list=[loss])
        rows = fluid.profiler.stop_profiler("calls", str(tmp_path / "p"))
    trace = json.load(open(str(tmp_path / "p")))
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}
    calls = [r[1] for r in rows]
    assert calls == sorted(calls, reverse=True)
    assert any(r[0].startswith("allreduce") or "all_reduce" in r[0] for r in rows), rows


def test_profiler_misuse():
    with pytest.raises(ValueError, match="'TPU'"):
        with fluid.profiler.profiler("TPU"):
            pass
    with pytest.raises(ValueError, match="'fastest'"):
        with fluid.profiler.profiler("CPU", "fastest"):
            pass
    with pytest.raises(RuntimeError, match="not running"):
        fluid.profiler.stop_profiler()
    fluid.profiler.start_profiler("CPU")
    try:
        with pytest.raises(RuntimeError, match="already running"):
            fluid.profiler.start_profiler("CPU")
    finally:
        fluid.profiler.stop_profiler(profile_path=None)


def test_flags(monkeypatch):
    monkeypatch.delenv("LOOM_CONV_ALGO", raising=False)
    assert fluid.get_flags(["FLAGS_conv_algo"]) == {"FLAGS_conv_algo": "direct"}
    fluid.set_flags({"FLAGS_conv_algo": "im2col"})
    assert os.environ["LOOM_CONV_ALGO"] == "im2col"
    assert fluid.get_flags("FLAGS_conv_algo") == {"FLAGS_conv_algo": "im2col"}
    fluid.set_flags({"FLAGS_conv_algo": "direct"})
    with pytest.raises(ValueError, match="FLAGS_no_such_flag"):
        fluid.set_flags({"FLAGS_no_such_flag": 1})
    with pytest.raises(ValueError, match="FLAGS_no_such_flag"):
        fluid.get_flags(["FLAGS_conv_algo", "FLAGS_no_such_flag"])
    with pytest.raises(ValueError, match="FLAGS_conv_algo"):
        fluid.set_flags({"FLAGS_conv_algo": "winograd"})
    # Read once per process: refused, not silently ignored; nothing of the call is applied.
    monkeypatch.delenv("LOOM_KVSTORE_BIGARRAY_BOUND", raising=False)
    with pytest.raises(ValueError, match="FLAGS_num_threads.*LOOM_NUM_THREADS"):
        fluid.set_flags({"FLAGS_kvstore_bigarray_bound": 5, "FLAGS_num_threads": 3})
    assert "LOOM_KVSTORE_BIGARRAY_BOUND" not in os.environ
    fluid.set_flags({"FLAGS_kvstore_bigarray_bound": 5})
    assert fluid.get_flags("FLAGS_kvstore_bigarray_bound") == {"FLAGS_kvstore_bigarray_bound": 5}


def test_conv_algo_flag_reaches_the_kernels(monkeypatch):
    """The direct and im2col convolutions agree; the flag switches between them per run."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [16, 8, 8])
        y = fluid.layers.conv2d(x, 16, 3, padding=1)
    exe = fluid.Executor(fluid.CPUPlace())
    data = np.random.RandomState(1).rand(2, 16, 8, 8).astype("float32")
    out = {}
    with fluid.scope_guard(core.Scope()):
        exe.run(startup)
        for algo in ("im2col", "direct"):
            fluid.set_flags({"FLAGS_conv_algo": algo})
            (out[algo],) = exe.run(main, feed={"x": data}, fetch_list=[y])
    np.testing.assert_allclose(out["im2col"], out["direct"], rtol=1e-4, atol=1e-5)


def test_feeds_of_different_batch_sizes_fail_before_any_op_runs():
    main, startup, loss, acc = net()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = np.array(scope.find_var("fc_0.w_0").get_tensor()).copy()
        with pytest.raises(ValueError, match="'img' \\(32 rows\\) and 'label' \\(16 rows\\)"):
            exe.run(main, feed=feed(32, 16), fetch_list=[loss, acc])
        # Nothing ran: the parameters are as the startup program left them.
        np.testing.assert_array_equal(np.array(scope.find_var("fc_0.w_0").get_tensor()), w)
        compiled = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(2))
        # The runner splitting a CompiledProgram's batch checks the same before any place runs.
        with pytest.raises(ValueError, match="different numbers of samples"):
            exe.run(compiled, feed=feed(32, 16), fetch_list=[loss])
        exe.run(main, feed=feed(16, 16), fetch_list=[loss, acc])
