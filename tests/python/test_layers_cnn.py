"""CNN, normalization, dropout and embedding layers build, train one step and run in test mode."""
import numpy as np

import loom as fluid
from loom import core


def test_cnn_layers_train_and_switch_to_test_mode():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.layers.data("img", [1, 8, 8])
        ids = fluid.layers.data("ids", [1], dtype="int64")
        label = fluid.layers.data("label", [1], dtype="int64")
        c = fluid.layers.conv2d(img, 4, 3, padding=1, act="relu")
        c = fluid.layers.batch_norm(c)
        p = fluid.layers.pool2d(c, 2, "max", 2)
        g = fluid.layers.pool2d(c, pool_type="avg", global_pooling=True)
        e = fluid.layers.embedding(ids, size=[10, 4])
        h = fluid.layers.fc([p, g], 8, act="tanh")
        h = fluid.layers.dropout(h, 0.3, seed=2)
        logits = fluid.layers.fc(fluid.layers.concat([h, fluid.layers.reshape(e, [-1, 4])], 1), 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        test = main.clone(for_test=True)
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    assert p.shape == (-1, 4, 4, 4) and g.shape == (-1, 4, 1, 1)
    rng = np.random.RandomState(0)
    feed = {"img": rng.rand(6, 1, 8, 8).astype("float32"),
            "ids": rng.randint(0, 10, (6, 1)).astype("int64"),
            "label": rng.randint(0, 3, (6, 1)).astype("int64")}
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        mean_name = [v.name() for v in main.global_block().desc.all_vars() if v.name().endswith(".mean")][0]
        losses = [exe.run(main, feed=feed, fetch_list=[loss])[0][0] for _ in range(20)]
        moving_mean = np.array(scope.find_var(mean_name).get_tensor()).copy()
        (t1,) = exe.run(test, feed=feed, fetch_list=[loss])
        (t2,) = exe.run(test, feed=feed, fetch_list=[loss])
        # Test mode is deterministic (no dropout) and leaves the moving statistics alone.
        np.testing.assert_array_equal(t1, t2)
        np.testing.assert_array_equal(np.array(scope.find_var(mean_name).get_tensor()), moving_mean)
    assert losses[-1] < losses[0]
    assert np.any(moving_mean != 0)
    ops = [op.type for op in test.global_block().ops]
    assert "momentum" not in ops and "dropout" in ops
    assert all(op.attr("is_test") for op in test.global_block().ops if op.has_attr("is_test"))
