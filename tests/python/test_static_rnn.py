"""StaticRNN (unrolled when its step is built): outputs equal a NumPy recurrence with the
step's parameters, memories from init or from a batch reference, gradients train."""
import numpy as np
import pytest

import loom as fluid

L = fluid.layers


def test_static_rnn_matches_numpy_and_trains():
    rng = np.random.RandomState(0)
    x = rng.randn(4, 3, 2)  # [time, batch, width]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = fluid.data("x", [4, 3, 2], dtype="float64")
        h0 = fluid.data("h0", [3, 5], dtype="float64")
        rnn = L.StaticRNN()
        with rnn.step():
            word = rnn.step_input(xv)
            prev = rnn.memory(init=h0)
            acc = rnn.memory(shape=[-1, 2], batch_ref=word, init_value=1.0)
            hidden = L.fc(input=[word, prev], size=5, act="tanh",
                          param_attr=[fluid.ParamAttr(name="wx"), fluid.ParamAttr(name="wh")],
                          bias_attr=fluid.ParamAttr(name="b"))
            total = L.elementwise_add(acc, word)
            rnn.update_memory(prev, hidden)
            rnn.update_memory(acc, total)
            rnn.step_output(hidden)
            rnn.step_output(total)
        out, sums = rnn()
        loss = L.mean(L.square(out))
        fluid.optimizer.SGD(0.5).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    h0v = rng.randn(3, 5)
    with fluid.scope_guard(scope):
        exe.run(startup)
        p = {n: np.array(scope.find_var(n).get_tensor()) for n in ("wx", "wh", "b")}
        o, s, l0 = exe.run(main, feed={"x": x, "h0": h0v}, fetch_list=[out, sums, loss])
        losses = [float(exe.run(main, feed={"x": x, "h0": h0v}, fetch_list=[loss])[0][0])
                  for _ in range(20)]
    h, want = h0v, []
    for t in range(4):
        h = np.tanh(x[t] @ p["wx"] + h @ p["wh"] + p["b"])
        want.append(h)
    np.testing.assert_allclose(o, np.stack(want), rtol=1e-10)
    np.testing.assert_allclose(s, 1.0 + np.cumsum(x, axis=0), rtol=1e-12)
    assert losses[-1] < 0.5 * float(l0[0]), (float(l0[0]), losses[-1])


def test_static_rnn_misuse_is_explained():
    main = fluid.Program()
    with fluid.program_guard(main):
        x = fluid.data("x", [None, 3, 2])
        rnn = L.StaticRNN()
        with pytest.raises(ValueError, match="time dim"):
            with rnn.step():
                rnn.step_input(x)
        with pytest.raises(RuntimeError, match="inside `with rnn.step"):
            L.StaticRNN().step_input(x)
