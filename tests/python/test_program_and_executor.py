"""Program building, executor round trips, SGD against NumPy, save/load, CLI parity, errors."""
import os
import subprocess

import numpy as np
import pytest

import loom as fluid
from loom import core

BUILD = os.environ.get("LOOM_BUILD_DIR",
                       os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LOOM = os.path.abspath(os.path.join(BUILD, "tools", "loom"))


def mlp(hidden=8, classes=3, lr=0.5):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(x, hidden, act="relu")
        logits = fluid.layers.fc(h, classes)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.SGD(lr).minimize(loss)
    return main, startup, loss


def data(n=32, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 4).astype("float32")
    y = (x[:, 0] > 0).astype("int64").reshape(-1, 1) + (x[:, 1] > 1).astype("int64").reshape(-1, 1)
    return x, y


def test_layers_build_the_descs_asked_for():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [6])
        out = fluid.layers.fc(x, 5, act="relu", param_attr=fluid.ParamAttr(name="w"))
    ops = [op.type for op in main.global_block().ops]
    assert ops == ["mul", "elementwise_add", "relu"]
    assert main.global_block().var("w").shape == (6, 5)
    assert out.shape == (-1, 5)
    assert [op.type for op in startup.global_block().ops] == ["uniform_random", "fill_constant"]
    assert {p.name for p in main.all_parameters()} == {"w", "fc_0.b_0"}
    main.verify()


def test_training_reduces_loss_and_sgd_matches_numpy():
    main, startup, loss = mlp()
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    x, y = data()
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = np.array(scope.find_var("fc_1.w_0").get_tensor())
        grad_name = "fc_1.w_0@GRAD"
        l0, g = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss, grad_name])
        w1 = np.array(scope.find_var("fc_1.w_0").get_tensor())
        np.testing.assert_allclose(w1, w - 0.5 * g, rtol=1e-5, atol=1e-6)
        for _ in range(100):
            (l,) = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
    assert l[0] < l0[0] / 5


def test_clone_for_test_drops_backward_and_optimizer():
    main, _, loss = mlp()
    test = main.clone(for_test=True)
    roles = [op.attr("op_role") for op in test.global_block().ops]
    assert all(r in (0, 256) for r in roles)
    assert len(test.global_block().ops) < len(main.global_block().ops)


def test_save_and_load_params(tmp_path):
    main, startup, loss = mlp()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_params(exe, str(tmp_path / "p"), main)
        saved = np.array(scope.find_var("fc_0.w_0").get_tensor())
    fresh = core.Scope()
    with fluid.scope_guard(fresh):
        fluid.io.load_params(exe, str(tmp_path / "p"), main)
        np.testing.assert_array_equal(np.array(fresh.find_var("fc_0.w_0").get_tensor()), saved)


def test_bundle_run_by_cli_matches_python_executor(tmp_path):
    main, startup, loss = mlp()
    x, y = data(64, seed=3)
    bundle = tmp_path / "bundle"
    fluid.io.save_program_bundle(str(bundle), main, startup, ["x", "y"], [loss],
                                 data={"x": x, "y": y}, batch_size=64)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_params(exe, str(tmp_path / "init"), main)
        losses = [exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])[0][0] for _ in range(3)]
    out = subprocess.run([LOOM, "run", str(bundle), "--iters", "3", "--print-every", "1",
                          "--load-params", str(tmp_path / "init")],
                         capture_output=True, text=True, check=True).stdout
    cli = [float(line.split(loss.name + " ")[1].split()[0]) for line in out.splitlines()
           if line.startswith("iter ")]
    np.testing.assert_allclose(cli, losses, rtol=1e-5)


def test_wrong_feed_name_shape_and_dtype_raise_clear_errors():
    main, startup, loss = mlp()
    exe = fluid.Executor(fluid.CPUPlace())
    x, y = data()
    with fluid.scope_guard(core.Scope()):
        exe.run(startup)
        with pytest.raises(LookupError, match="'nope'"):
            exe.run(main, feed={"x": x, "y": y, "nope": x}, fetch_list=[loss])
        with pytest.raises(ValueError, match=r"'x'.*\[32, 5\]"):
            exe.run(main, feed={"x": np.zeros((32, 5), "float32"), "y": y}, fetch_list=[loss])
        with pytest.raises(ValueError, match="float64"):
            exe.run(main, feed={"x": x.astype("float64"), "y": y}, fetch_list=[loss])
        with pytest.raises(LookupError, match="'ghost'"):
            exe.run(main, feed={"x": x, "y": y}, fetch_list=["ghost"])
        with pytest.raises(core.LoomError, match="'y'"):
            exe.run(main, feed={"x": x}, fetch_list=[loss])


def test_bad_layer_arguments_raise_at_the_layer():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4])
        with pytest.raises(ValueError, match="size"):
            fluid.layers.fc(x, 0)
        w = fluid.layers.data("w", [3], append_batch_size=False)
        with pytest.raises(ValueError, match=r"mul.*\[-1, 4\].*\[3\]|mul"):
            fluid.layers.mul(x, w)
        with pytest.raises(ValueError, match="activation"):
            fluid.layers.fc(x, 3, act="swish9")
    # A failed layer leaves no half-built op behind.
    assert [op.type for op in main.global_block().ops].count("mul") == 0


def test_feeds_of_any_memory_layout_give_the_same_result():
    # C-contiguous feeds are shared with the executor, others are copied: both must be right,
    # and the caller's array must not change.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        y = fluid.layers.scale(fluid.layers.relu(x), scale=3.0)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    base = np.random.RandomState(1).randn(6, 8).astype("float32")
    layouts = {"c": base[:, :4].copy(), "fortran": np.asfortranarray(base[:, :4]),
               "strided": base[:, ::2], "offset": base[:, 4:]}
    for name, arr in layouts.items():
        before = arr.copy()
        got, = exe.run(main, feed={"x": arr}, fetch_list=[y])
        np.testing.assert_allclose(got, 3.0 * np.maximum(arr, 0), err_msg=name)
        np.testing.assert_array_equal(arr, before, err_msg=name)
