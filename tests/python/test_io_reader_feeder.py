"""DataFeeder, reader decorators, inference-model save/load, initializers and regularizers."""
import numpy as np
import pytest

import loom as fluid
from loom import core


def small_net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3])
        label = fluid.layers.data("label", [1], dtype="int64")
        logits = fluid.layers.fc(x, 2)
        prob = fluid.layers.softmax(logits)
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
    return main, startup, x, label, prob, loss


def test_data_feeder_builds_feed_dict():
    main, startup, x, label, prob, loss = small_net()
    feeder = fluid.DataFeeder([x, label], fluid.CPUPlace())
    feed = feeder.feed([([1, 2, 3], [1]), ([4, 5, 6], [0])])
    assert feed["x"].dtype == np.float32 and feed["x"].shape == (2, 3)
    assert feed["label"].dtype == np.int64 and feed["label"].shape == (2, 1)
    with pytest.raises(ValueError, match="3 fields"):
        feeder.feed([([1, 2, 3], [1], 7)])
    with pytest.raises(ValueError, match="'x'"):
        feeder.feed([([1, 2], [1])])


def test_reader_batch_and_shuffle():
    reader = lambda: iter(range(10))
    batches = list(fluid.reader.batch(reader, 4)())
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(fluid.reader.batch(reader, 4, drop_last=True)()) == batches[:2]
    shuffled = list(fluid.reader.shuffle(reader, 5, seed=1)())
    assert sorted(shuffled) == list(range(10)) and shuffled != list(range(10))
    assert shuffled == list(fluid.reader.shuffle(reader, 5, seed=1)())
    with pytest.raises(ValueError):
        fluid.reader.batch(reader, 0)


def test_inference_model_round_trip(tmp_path):
    main, startup, x, label, prob, loss = small_net()
    exe = fluid.Executor(fluid.CPUPlace())
    data = np.random.RandomState(0).randn(4, 3).astype("float32")
    with fluid.scope_guard(core.Scope()):
        exe.run(startup)
        (want,) = exe.run(main, feed={"x": data, "label": np.zeros((4, 1), "int64")},
                          fetch_list=[prob])
        fluid.io.save_inference_model(str(tmp_path / "m"), ["x"], [prob], exe, main)
    with fluid.scope_guard(core.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "m"), exe)
        assert feeds == ["x"] and [f.name for f in fetches] == [prob.name]
        (got,) = exe.run(program, feed={"x": data}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_initializers_fill_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [50])
        fluid.layers.fc(x, 40, param_attr=fluid.ParamAttr(
            name="w_const", initializer=fluid.initializer.Constant(0.25)), bias_attr=False)
        fluid.layers.fc(x, 40, param_attr=fluid.ParamAttr(
            name="w_normal", initializer=fluid.initializer.Normal(0.0, 2.0, seed=5)),
            bias_attr=False)
        fluid.layers.fc(x, 40, param_attr=fluid.ParamAttr(
            name="w_xavier", initializer=fluid.initializer.Xavier(seed=6)), bias_attr=False)
    scope = core.Scope()
    with fluid.scope_guard(scope):
        fluid.Executor(fluid.CPUPlace()).run(startup)
    get = lambda n: np.array(scope.find_var(n).get_tensor())
    assert np.all(get("w_const") == 0.25)
    assert abs(get("w_normal").std() - 2.0) < 0.15
    limit = np.sqrt(6.0 / 90)
    assert np.abs(get("w_xavier")).max() <= limit + 1e-6
    assert get("w_xavier").std() > limit / 3


def test_l2_decay_adds_coeff_times_param_to_the_gradient():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [2])
        y = fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(1.0)), bias_attr=False)
        loss = fluid.layers.mean(y)
        fluid.optimizer.SGD(0.1, regularization=fluid.regularizer.L2Decay(0.5)).minimize(loss)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        exe.run(main, feed={"x": np.array([[1.0, 3.0]], "float32")})
        w = np.array(scope.find_var("w").get_tensor())
    # grad = x + 0.5 * w = [1.5, 3.5]; w = 1 - 0.1 * grad
    np.testing.assert_allclose(w.ravel(), [1 - 0.15, 1 - 0.35], rtol=1e-6)
