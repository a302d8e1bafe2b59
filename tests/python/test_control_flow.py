"""layers.cond and the comparison / logical layers: the branch taken runs, gradients flow
through it (equal to the branch written without control flow, and to finite differences),
training switches branches on a step counter, and bad arguments give clear errors."""
import numpy as np
import pytest

import loom as fluid
from loom import core


def run(main, startup, feed, fetch, init=None):
    """Runs startup then main once; init: parameter values to use instead of startup's."""
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    for name, value in (init or {}).items():
        scope.find_var(name).get_tensor().set(value, fluid.CPUPlace())
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def test_comparisons_and_logical_layers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3])
        y = fluid.layers.data("y", [3], append_batch_size=False)
        lt = fluid.layers.less_than(x, y)
        ge = x >= y
        gt = x > 2.0
        eq = fluid.layers.equal(x, y)
        both = fluid.layers.logical_and(lt, fluid.layers.logical_not(eq))
        either = fluid.layers.logical_or(gt, eq)
    xv = np.array([[1, 2, 3], [4, 2, 0]], "float32")
    yv = np.array([2, 2, 2], "float32")
    (o_lt, o_ge, o_gt, o_eq, o_both, o_either), _ = run(
        main, startup, {"x": xv, "y": yv}, [lt, ge, gt, eq, both, either])
    assert o_lt.dtype == np.bool_
    np.testing.assert_array_equal(o_lt, xv < yv)
    np.testing.assert_array_equal(o_ge, xv >= yv)
    np.testing.assert_array_equal(o_gt, xv > 2)
    np.testing.assert_array_equal(o_eq, xv == yv)
    np.testing.assert_array_equal(o_both, (xv < yv) & ~(xv == yv))
    np.testing.assert_array_equal(o_either, (xv > 2) | (xv == yv))


def build_branches(flat=None):
    """h = fc(x); logits = fc_a(h) if mean(x) > 0 else fc_b(0.5 h); flat='a'/'b' writes the
    branch without cond."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [6], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(x, 5, act="tanh", name="shared")

        def branch_a():
            return fluid.layers.fc(h, 3, name="fc_a")

        def branch_b():
            return fluid.layers.fc(fluid.layers.scale(h, 0.5), 3, name="fc_b")

        # Both variants declare both branches' parameters in the same order.
        if flat is None:
            pred = fluid.layers.reduce_mean(x) > 0.0
            logits = fluid.layers.cond(pred, branch_a, branch_b)
        else:
            a, b = branch_a(), branch_b()
            logits = a if flat == "a" else b
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        pairs = fluid.append_backward(loss)
    return main, startup, loss, pairs


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_gradients_equal_the_branch_written_flat(sign):
    rng = np.random.RandomState(0)
    x = np.abs(rng.randn(8, 6)) * sign
    y = rng.randint(0, 3, size=(8, 1)).astype("int64")
    main, startup, loss, pairs = build_branches()
    # One sub-block per branch, one gradient block per branch.
    assert main.num_blocks() == 5
    names = [g.name for _, g in pairs]
    got, scope = run(main, startup, {"x": x, "y": y}, [loss] + names)
    init = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p, _ in pairs}
    fmain, fstartup, floss, fpairs = build_branches(flat="a" if sign > 0 else "b")
    fnames = {p.name: g.name for p, g in fpairs}
    want, _ = run(fmain, fstartup, {"x": x, "y": y}, [floss] + list(fnames.values()), init)
    want = dict(zip(["loss"] + list(fnames), want))
    np.testing.assert_allclose(got[0], want["loss"], rtol=1e-12)
    taken, other = ("fc_a", "fc_b") if sign > 0 else ("fc_b", "fc_a")
    for (p, _), g in zip(pairs, got[1:]):
        if p.name.startswith(other):
            assert not g.any(), "%s is used only in the branch not taken" % p.name
        else:
            np.testing.assert_allclose(g, want[p.name], rtol=1e-10, atol=1e-14, err_msg=p.name)


def test_cond_gradients_match_finite_differences():
    rng = np.random.RandomState(1)
    x = rng.randn(8, 6) + 0.3
    y = rng.randint(0, 3, size=(8, 1)).astype("int64")
    main, startup, loss, pairs = build_branches()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": x, "y": y}
    grads = exe.run(main, feed=feed, fetch_list=[g for _, g in pairs], scope=scope)
    fwd = main.clone(for_test=True)
    eps = 1e-6
    for (p, _), g in zip(pairs, grads):
        t = scope.find_var(p.name).get_tensor()
        value = np.array(t)
        for idx in [(0,) * value.ndim, tuple(s - 1 for s in value.shape)]:
            for d, sgn in ((eps, 1), (-eps, -1)):
                v = value.copy()
                v[idx] += d
                t.set(v, fluid.CPUPlace())
                out, = exe.run(fwd, feed=feed, fetch_list=[loss], scope=scope)
                if sgn > 0:
                    up = float(out[0])
                else:
                    down = float(out[0])
            t.set(value, fluid.CPUPlace())
            np.testing.assert_allclose(g[idx], (up - down) / (2 * eps), atol=1e-7,
                                       err_msg="%s%s" % (p.name, idx))


def test_training_switches_branches_on_a_step_counter():
    # Steps 1-3 take the false branch, later steps the true one; both branch parameters move
    # only while their branch runs.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        step = fluid.layers.create_global_var([1], 0.0, "float32", persistable=True, name="step")
        fluid.layers.increment(step)
        pred = step > 3.0
        out = fluid.layers.cond(pred, lambda: fluid.layers.fc(x, 1, name="late"),
                                lambda: fluid.layers.fc(x, 1, name="early"))
        loss = fluid.layers.mean(fluid.layers.square(out))
        fluid.optimizer.SGD(0.01).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    xv = np.ones((2, 4), "float32")
    history = []
    for _ in range(6):
        exe.run(main, feed={"x": xv}, fetch_list=[loss], scope=scope)
        history.append({n: np.array(scope.find_var(n).get_tensor()).copy()
                        for n in ("early.w_0", "late.w_0")})
    for i in range(1, 6):
        early_moved = not np.array_equal(history[i]["early.w_0"], history[i - 1]["early.w_0"])
        late_moved = not np.array_equal(history[i]["late.w_0"], history[i - 1]["late.w_0"])
        assert (early_moved, late_moved) == ((True, False) if i < 3 else (False, True)), i


def test_cond_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3])
        with pytest.raises(TypeError, match="must be bool"):
            fluid.layers.cond(fluid.layers.reduce_mean(x), lambda: x, lambda: x)
        many = fluid.layers.less_than(x, x)
        with pytest.raises(ValueError, match="one element"):
            fluid.layers.cond(fluid.layers.fill_constant([2], "bool", 1), lambda: x, lambda: x)
        pred = fluid.layers.reduce_mean(x) > 0.0
        with pytest.raises(ValueError, match="true_fn returns 1 variable.*false_fn 2"):
            fluid.layers.cond(pred, lambda: x, lambda: [x, x])
        with pytest.raises(ValueError, match="false_fn is None"):
            fluid.layers.cond(pred, lambda: x)
        with pytest.raises(TypeError, match="output 0 is float32 in true_fn"):
            fluid.layers.cond(pred, lambda: x, lambda: fluid.layers.cast(x, "int64"))
        with pytest.raises(TypeError, match="must return None, a Variable"):
            fluid.layers.cond(pred, lambda: 3, lambda: 4)
    # The failed calls left the program in the enclosing block.
    assert main.current_block_idx == 0
    # A batch-shaped condition is refused when it runs (it must hold one element).
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [1])
        out = fluid.layers.cond(x > 0.0, lambda: fluid.layers.scale(x, 2.0),
                                lambda: fluid.layers.scale(x, 3.0))
    with pytest.raises(core.EnforceNotMet if hasattr(core, "EnforceNotMet") else Exception,
                       match="conditional_block.*one element"):
        run(main, startup, {"x": np.ones((2, 1), "float32")}, [out])
    del many


def test_saved_program_with_branches_runs_and_transpiles_in_the_cli(tmp_path):
    import os
    import subprocess
    build = os.environ.get("LOOM_BUILD_DIR",
                           os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [6])
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(x, 8, act="relu")
        step = fluid.layers.create_global_var([1], 0.0, "float32", persistable=True, name="step")
        fluid.layers.increment(step)
        # Iteration 1 takes the second branch, later ones the first.
        logits = fluid.layers.cond(step > 1.5, lambda: fluid.layers.fc(h, 3, name="late"),
                                   lambda: fluid.layers.fc(h, 3, act="tanh", name="early"))
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.SGD(0.5).minimize(loss)
    rng = np.random.RandomState(4)
    xv = rng.randn(32, 6).astype("float32")
    yv = rng.randint(0, 3, size=(32, 1)).astype("int64")
    bundle = tmp_path / "bundle"
    fluid.io.save_program_bundle(str(bundle), main, startup, ["x", "y"], [loss],
                                 data={"x": xv, "y": yv}, batch_size=32)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_params(exe, str(tmp_path / "init"), main)
        losses = [exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[loss])[0][0]
                  for _ in range(3)]

    def loom_run(path):
        out = subprocess.run([loom, "run", str(path), "--iters", "3", "--print-every", "1",
                              "--load-params", str(tmp_path / "init")],
                             capture_output=True, text=True, check=True).stdout
        return [float(line.split(loss.name + " ")[1].split()[0]) for line in out.splitlines()
                if line.startswith("iter ")]

    np.testing.assert_allclose(loom_run(bundle), losses, rtol=1e-5)
    # Transpiled to 2 places: the full-batch update, so the same losses.
    subprocess.run([loom, "transpile", str(bundle), "-o", str(tmp_path / "two"), "--places",
                    "cpu:2", "--mode", "owner"], capture_output=True, text=True, check=True)
    np.testing.assert_allclose(loom_run(tmp_path / "two"), losses, rtol=1e-5)
    dot = tmp_path / "main.dot"
    subprocess.run([loom, "inspect", str(tmp_path / "two" / "rank0" / "main.pb"), "--dot",
                    str(dot)], capture_output=True, text=True, check=True)
    text = dot.read_text()
    assert "lhead=cluster_block1" in text and "lhead=cluster_block2" in text


@pytest.mark.parametrize("shift", [1.0, 0.2, -1.0])
def test_nested_cond_gradients_match_finite_differences(shift):
    # outer: mean(x) > 0 ? (inner: mean(x) > 0.5 ? fc_a(h) : fc_b(h)) : fc_c(2h); the shifts
    # take the three paths. A nested branch's gradient block reads the gradients of the
    # enclosing branch.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [6], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(x, 5, act="tanh", name="shared")
        m = fluid.layers.reduce_mean(x)
        logits = fluid.layers.cond(
            m > 0.0,
            lambda: fluid.layers.cond(m > 0.5, lambda: fluid.layers.fc(h, 3, name="a"),
                                      lambda: fluid.layers.fc(h, 3, act="tanh", name="b")),
            lambda: fluid.layers.fc(fluid.layers.scale(h, 2.0), 3, name="c"))
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        pairs = fluid.append_backward(loss)
    main.verify()
    taken = {1.0: "a", 0.2: "b", -1.0: "c"}[shift]
    rng = np.random.RandomState(2)
    feed = {"x": rng.rand(8, 6) * 0.2 + shift - 0.1,
            "y": rng.randint(0, 3, size=(8, 1)).astype("int64")}
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    grads = exe.run(main, feed=feed, fetch_list=[g for _, g in pairs], scope=scope)
    fwd = main.clone(for_test=True)
    eps = 1e-6
    for (p, _), g in zip(pairs, grads):
        if p.name[0] in "abc" and p.name[0] != taken:
            assert not g.any(), "%s belongs to a branch not taken" % p.name
            continue
        t = scope.find_var(p.name).get_tensor()
        value = np.array(t)
        idx = (0,) * value.ndim
        losses = []
        for d in (eps, -eps):
            v = value.copy()
            v[idx] += d
            t.set(v, fluid.CPUPlace())
            losses.append(float(exe.run(fwd, feed=feed, fetch_list=[loss], scope=scope)[0][0]))
        t.set(value, fluid.CPUPlace())
        np.testing.assert_allclose(g[idx], (losses[0] - losses[1]) / (2 * eps), atol=1e-7,
                                   err_msg=p.name)
        assert g.any(), p.name


def test_case_and_switch_case_pick_one_branch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [1], append_batch_size=False)
        k = fluid.layers.data("k", [1], dtype="int64", append_batch_size=False)
        by_case = fluid.layers.case(
            [(x < 0.0, lambda: fluid.layers.scale(x, 10.0)),
             (x < 1.0, lambda: fluid.layers.scale(x, 20.0))],
            default=lambda: fluid.layers.scale(x, 30.0))
        by_last = fluid.layers.case([(x < 0.0, lambda: fluid.layers.scale(x, 10.0)),
                                     (x < 1.0, lambda: fluid.layers.scale(x, 20.0))])
        by_index = fluid.layers.switch_case(
            k, {0: lambda: fluid.layers.scale(x, 1.0), 3: lambda: fluid.layers.scale(x, 3.0),
                1: lambda: fluid.layers.scale(x, 2.0)})
        by_list = fluid.layers.switch_case(
            k, [lambda: fluid.layers.scale(x, 1.0), lambda: fluid.layers.scale(x, 2.0)],
            default=lambda: fluid.layers.scale(x, -1.0))
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    for xv, kv, want in ((-2.0, 0, (-20, -20, -2, -2)), (0.5, 1, (10, 10, 1, 1)),
                         (3.0, 3, (90, 60, 9, -3)), (3.0, 7, (90, 60, 9, -3))):
        got = exe.run(main, feed={"x": np.array([xv], "float32"), "k": np.array([kv], "int64")},
                      fetch_list=[by_case, by_last, by_index, by_list], scope=scope)
        np.testing.assert_allclose([g[0] for g in got], want, err_msg="x=%s k=%s" % (xv, kv))
    with fluid.program_guard(main, startup):
        with pytest.raises(TypeError, match="must be int32 or int64"):
            fluid.layers.switch_case(x, [lambda: x])
        with pytest.raises(ValueError, match="index 1 appears twice"):
            fluid.layers.switch_case(k, [(1, lambda: x), (1, lambda: x)])
        with pytest.raises(TypeError, match=r"pred_fn_pairs\[0\]"):
            fluid.layers.case([(x < 0.0, 3)])


def build_rnn(steps, unrolled=False, dtype="float64"):
    """h = tanh(fc(x)); then `steps` times h = tanh(h @ cell.w) (a while_loop, or written out);
    loss = mean(h^2)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4], dtype=dtype)
        h = fluid.layers.fc(x, 4, act="tanh", name="enc")
        cell = fluid.ParamAttr(name="cell.w")
        if unrolled:
            for _ in range(steps):
                h = fluid.layers.fc(h, 4, act="tanh", param_attr=cell, bias_attr=False)
        else:
            i = fluid.layers.fill_constant([1], "int64", 0)
            n = fluid.layers.fill_constant([1], "int64", steps)

            def body(i, h):
                return [fluid.layers.increment(i, in_place=False),
                        fluid.layers.fc(h, 4, act="tanh", param_attr=cell, bias_attr=False)]

            i, h = fluid.layers.while_loop(lambda i, h: fluid.layers.less_than(i, n), body,
                                           [i, h])
        loss = fluid.layers.mean(fluid.layers.square(h))
    return main, startup, loss


@pytest.mark.parametrize("steps", [3, 1, 0])
def test_while_loop_gradients_equal_the_loop_written_out(steps):
    main, startup, loss = build_rnn(steps)
    pairs = dict((p.name, g.name) for p, g in fluid.append_backward(loss, ))
    main.verify()
    assert {"enc.w_0", "enc.b_0", "cell.w"} <= set(pairs)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    init = {n: np.array(scope.find_var(n).get_tensor()) for n in pairs}
    feed = {"x": np.random.RandomState(0).randn(5, 4)}
    got = exe.run(main, feed=feed, fetch_list=[loss] + list(pairs.values()), scope=scope)
    got = dict(zip(["loss"] + list(pairs), got))
    flat_main, flat_startup, flat_loss = build_rnn(steps, unrolled=True)
    flat_pairs = dict((p.name, g.name) for p, g in fluid.append_backward(flat_loss))
    want, _ = run(flat_main, flat_startup, feed, [flat_loss] + list(flat_pairs.values()),
                  {n: v for n, v in init.items() if n in flat_pairs})
    want = dict(zip(["loss"] + list(flat_pairs), want))
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-12)
    for name in pairs:
        if name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-14,
                                       err_msg=name)
        else:  # cell.w with no iteration
            assert steps == 0 and not got[name].any(), name
    # Training twice in the same scope reuses nothing stale.
    again = exe.run(main, feed=feed, fetch_list=[pairs["cell.w"]], scope=scope)[0]
    np.testing.assert_array_equal(again, got["cell.w"])


def test_while_loop_state_whose_final_value_is_unused_still_carries_gradients():
    """Only the accumulator leaves the loop; the state h feeds it at every step, so its
    gradient must flow from each iteration to the one before (seeded with zeros at the end)."""
    def build(unrolled):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.layers.data("x", [4], dtype="float64")
            h = fluid.layers.fc(x, 4, act="tanh", name="enc")
            acc = fluid.layers.scale(h, 0.0)
            cell = fluid.ParamAttr(name="cell.w")
            if unrolled:
                for _ in range(3):
                    h = fluid.layers.fc(h, 4, act="tanh", param_attr=cell, bias_attr=False)
                    acc = fluid.layers.elementwise_add(acc, h)
            else:
                i = fluid.layers.fill_constant([1], "int64", 0)
                n = fluid.layers.fill_constant([1], "int64", 3)

                def body(i, h, acc):
                    h2 = fluid.layers.fc(h, 4, act="tanh", param_attr=cell, bias_attr=False)
                    return [fluid.layers.increment(i, in_place=False), h2,
                            fluid.layers.elementwise_add(acc, h2)]

                _, _, acc = fluid.layers.while_loop(lambda i, h, acc: fluid.layers.less_than(
                    i, n), body, [i, h, acc])
            loss = fluid.layers.mean(fluid.layers.square(acc))
            pairs = [(p.name, g.name) for p, g in fluid.append_backward(loss)]
        return main, startup, loss, dict(pairs)

    feed = {"x": np.random.RandomState(1).randn(5, 4)}
    results = []
    for unrolled in (False, True):
        main, startup, loss, pairs = build(unrolled)
        exe = fluid.Executor(fluid.CPUPlace())
        scope = core.Scope()
        exe.run(startup, scope=scope)
        for name in pairs:  # the same initial values in both programs
            value = np.random.RandomState(len(name)).randn(
                *np.array(scope.find_var(name).get_tensor()).shape) * 0.5
            scope.find_var(name).get_tensor().set(value, fluid.CPUPlace())
        names = sorted(pairs)
        got = exe.run(main, feed=feed, fetch_list=[loss] + [pairs[n] for n in names],
                      scope=scope)
        results.append(dict(zip(["loss"] + names, got)))
    loop, flat = results
    assert set(loop) == set(flat)
    for name in flat:
        np.testing.assert_allclose(loop[name], flat[name], rtol=1e-10, atol=1e-14,
                                   err_msg=name)


def test_while_loop_in_test_mode_and_its_limits():
    main, startup, loss = build_rnn(4, dtype="float32")
    test = main.clone(for_test=True)
    assert any(op.type == "while" and op.attr("is_test") for op in test.global_block().ops)
    feed = {"x": np.random.RandomState(1).randn(3, 4).astype("float32")}
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    train_loss, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    test_loss, = exe.run(test, feed=feed, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(test_loss, train_loss, rtol=1e-6)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        i = fluid.layers.fill_constant([1], "int64", 0)
        forever = fluid.layers.while_loop(lambda i: i >= 0, lambda i: [i], [i],
                                          max_iterations=50)[0]
        with pytest.raises(ValueError, match="body returns 2 variable"):
            fluid.layers.while_loop(lambda i: i >= 0, lambda i: [i, i], [i])
        with pytest.raises(TypeError, match="must return a bool"):
            fluid.layers.while_loop(lambda i: i, lambda i: [i], [i])
    with pytest.raises(Exception, match="still holds after 50 iterations"):
        run(main, startup, {}, [forever])


def test_cond_inside_while_loop_gradients_match_finite_differences():
    # Iterations 0-1 take one cell, 2-3 the other: a branch inside a loop body.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4], dtype="float64")
        h = fluid.layers.fc(x, 4, act="tanh", name="enc")
        i = fluid.layers.fill_constant([1], "int64", 0)
        n = fluid.layers.fill_constant([1], "int64", 4)
        two = fluid.layers.fill_constant([1], "int64", 2)

        def body(i, h):
            h2 = fluid.layers.cond(
                i < two,
                lambda: fluid.layers.fc(h, 4, act="tanh", param_attr=fluid.ParamAttr(name="a.w"),
                                        bias_attr=False),
                lambda: fluid.layers.fc(h, 4, act="sigmoid",
                                        param_attr=fluid.ParamAttr(name="b.w"), bias_attr=False))
            return [fluid.layers.increment(i, in_place=False), h2]

        i, h = fluid.layers.while_loop(lambda i, h: i < n, body, [i, h])
        loss = fluid.layers.mean(fluid.layers.square(h))
        pairs = fluid.append_backward(loss)
    main.verify()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.random.RandomState(0).randn(5, 4)}
    grads = exe.run(main, feed=feed, fetch_list=[g for _, g in pairs], scope=scope)
    fwd = main.clone(for_test=True)
    assert {p.name for p, _ in pairs} >= {"a.w", "b.w", "enc.w_0"}
    for (p, _), g in zip(pairs, grads):
        assert g.any(), p.name
        t = scope.find_var(p.name).get_tensor()
        value = np.array(t)
        for idx in [(0,) * value.ndim, tuple(s - 1 for s in value.shape)]:
            losses = []
            for d in (1e-6, -1e-6):
                v = value.copy()
                v[idx] += d
                t.set(v, fluid.CPUPlace())
                losses.append(float(exe.run(fwd, feed=feed, fetch_list=[loss], scope=scope)[0][0]))
            t.set(value, fluid.CPUPlace())
            np.testing.assert_allclose(g[idx], (losses[0] - losses[1]) / 2e-6, atol=1e-8,
                                       err_msg="%s%s" % (p.name, idx))


def test_fluid_style_while_block():
    # Sum of 1..10 and a running product, written Fluid 1.x style; a body that never updates
    # the condition is refused.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = fluid.layers.fill_constant([1], "int64", 0)
        n = fluid.layers.fill_constant([1], "int64", 10)
        total = fluid.layers.fill_constant([1], "int64", 0)
        prod = fluid.layers.fill_constant([1], "float32", 1.0)
        cond = fluid.layers.less_than(i, n)
        loop = fluid.layers.While(cond)
        with loop.block():
            fluid.layers.increment(i)
            fluid.layers.assign(fluid.layers.elementwise_add(total, i), total)
            fluid.layers.assign(fluid.layers.scale(prod, 1.5), prod)
            fluid.layers.less_than(i, n, cond=cond)
        with pytest.raises(RuntimeError, match="entered once"):
            with loop.block():
                pass
        with pytest.raises(ValueError, match="never writes the condition"):
            with fluid.layers.While(cond).block():
                fluid.layers.increment(i)
    assert main.current_block_idx == 0
    (got_i, got_total, got_prod), _ = run(main, startup, {}, [i, total, prod])
    assert got_i[0] == 10 and got_total[0] == 55
    np.testing.assert_allclose(got_prod[0], 1.5 ** 10, rtol=1e-6)


def test_clone_for_test_reaches_ops_inside_branches():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        h = fluid.layers.fc(x, 4)
        out = fluid.layers.cond(fluid.layers.reduce_mean(x) > 0.0,
                                lambda: fluid.layers.dropout(h, 0.5),
                                lambda: fluid.layers.scale(h, 2.0))
        loss = fluid.layers.mean(out)
        fluid.optimizer.SGD(0.1).minimize(loss)
    test = main.clone(for_test=True)
    dropouts = [op for b in test.blocks for op in b.ops if op.type == "dropout"]
    assert dropouts and all(op.attr("is_test") for op in dropouts)
    assert not any(op.type.endswith("_grad") for op in test.global_block().ops)


def test_while_loop_on_cuda_matches_cpu():
    if not core.is_compiled_with_cuda() or core.cuda_device_count() == 0:
        pytest.skip("no CUDA device: the control-flow kernels are compiled, not run")
    main, startup, loss = build_rnn(3, dtype="float32")
    pairs = fluid.append_backward(loss)
    feed = {"x": np.random.RandomState(3).randn(5, 4).astype("float32")}
    cpu_scope = core.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=cpu_scope)
    fetch = [loss] + [g for _, g in pairs]
    results = []
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        scope = core.Scope()
        for p, _ in pairs:
            scope.var(p.name).get_tensor().set(
                np.array(cpu_scope.find_var(p.name).get_tensor()), place)
        results.append(fluid.Executor(place).run(main, feed=feed, fetch_list=fetch, scope=scope))
    for name, a, b in zip(["loss"] + [p.name for p, _ in pairs], *results):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=name)


def test_loop_body_reading_state_it_overwrote_is_a_clear_backward_error():
    # square(h) after the body wrote h: its gradient would see the value the iteration began
    # with, so backward refuses, naming both ops.
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        h = fluid.layers.fc(x, 4)
        out = fluid.layers.scale(h, 1.0)
        i = fluid.layers.fill_constant([1], "int64", 0)
        n = fluid.layers.fill_constant([1], "int64", 2)
        cond = fluid.layers.less_than(i, n)
        loop = fluid.layers.While(cond)
        with loop.block():
            fluid.layers.assign(fluid.layers.fc(h, 4, bias_attr=False), h)
            fluid.layers.assign(fluid.layers.square(h), out)
            fluid.layers.increment(i)
            fluid.layers.less_than(i, n, cond=cond)
        loss = fluid.layers.mean(out)
        with pytest.raises(NotImplementedError, match="op 'square' .* reads .* overwrites "
                                                      "earlier in the loop body"):
            fluid.append_backward(loss)
