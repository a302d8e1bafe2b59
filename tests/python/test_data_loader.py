"""fluid.io.DataLoader.from_generator / PyReader (iterable and not, sample / sample-list / batch
generators, several places) and the reader decorators of fluid.io."""
import numpy as np
import pytest

import loom as fluid
from loom import core


def model():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3])
        y = fluid.data("y", [None, 1])
        loss = fluid.layers.reduce_sum(fluid.layers.square(x)) + fluid.layers.reduce_sum(y)
    return main, startup, x, y, loss


def samples(n=10):
    def reader():
        for i in range(n):
            yield np.full([3], i, "float32"), np.array([i], "float32")
    return reader


def want_loss(rows):
    return sum(3.0 * i * i + i for i in rows)


def test_iterable_sample_generator_batches_and_drops_the_last():
    main, startup, x, y, loss = model()
    with fluid.program_guard(main, startup):
        loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4)
    loader.set_sample_generator(samples(10), batch_size=4, drop_last=True,
                                places=fluid.cpu_places(1))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got = [float(exe.run(main, feed=d, fetch_list=[loss])[0][0]) for d in loader()]
    assert got == [want_loss(range(0, 4)), want_loss(range(4, 8))]
    # A second pass reads the generator again.
    assert len(list(loader())) == 2


def test_iterable_batch_generator_and_return_list():
    main, startup, x, y, loss = model()

    def batches():
        for i in range(3):
            yield np.ones([2, 3], "float32") * i, np.zeros([2, 1], "float32")
    with fluid.program_guard(main, startup):
        loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], return_list=True)
    loader.set_batch_generator(batches, places=fluid.CPUPlace())
    got = list(loader())
    assert len(got) == 3 and np.array_equal(got[2][0], np.full([2, 3], 2, "float32"))


def test_non_iterable_loader_feeds_runs_until_eof():
    main, startup, x, y, loss = model()
    with fluid.program_guard(main, startup):
        reader = fluid.io.PyReader(feed_list=[x, y], capacity=2, iterable=False)
    reader.decorate_sample_list_generator(fluid.io.batch(samples(6), 3))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    for _ in range(2):  # two epochs
        reader.start()
        got = []
        with pytest.raises(fluid.core.EOFException):
            while True:
                got.append(float(exe.run(main, fetch_list=[loss])[0][0]))
        reader.reset()
        assert got == [want_loss(range(3)), want_loss(range(3, 6))]
    with pytest.raises(RuntimeError, match="not started"):
        exe.run(main, fetch_list=[loss])


def test_several_places_get_one_batch_each_and_train_as_the_union():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3])
        y = fluid.data("y", [None, 1])
        pred = fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(0.1)), bias_attr=False)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.01).minimize(loss)
        loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4)
    places = fluid.cpu_places(2)
    loader.set_sample_generator(samples(8), batch_size=2, places=places)
    exe, scope = fluid.Executor(fluid.CPUPlace()), core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                                  places=places)
        steps = list(loader())
        assert len(steps) == 2 and all(len(s) == 2 for s in steps)
        for s in steps:
            exe.run(compiled, feed=s, fetch_list=[loss])
        w = np.array(scope.find_var("w").get_tensor())
    # The same as one place on the union of each step's two batches.
    ref = np.full((3, 1), 0.1)
    for step in range(2):
        rows = np.arange(4 * step, 4 * step + 4, dtype="float64")
        xs, ys = np.repeat(rows[:, None], 3, 1), rows[:, None]
        grad = 2 * xs.T @ (xs @ ref - ys) / len(rows)
        ref = ref - 0.01 * grad
    np.testing.assert_allclose(w, ref, rtol=1e-5)


def test_generator_errors_reach_the_caller():
    main, startup, x, y, loss = model()

    def broken():
        yield np.zeros([3], "float32"), np.zeros([1], "float32")
        raise RuntimeError("the data file is truncated")
    with fluid.program_guard(main, startup):
        loader = fluid.io.DataLoader.from_generator(feed_list=[x, y])
    loader.set_sample_generator(broken, batch_size=1, places=fluid.cpu_places(1))
    with pytest.raises(RuntimeError, match="truncated"):
        list(loader())
    with pytest.raises(ValueError, match="feed_list"):
        fluid.io.DataLoader.from_generator(feed_list=None)


def test_reader_decorators():
    r = fluid.io
    nums = lambda: iter(range(5))  # noqa: E731
    assert list(r.batch(nums, 2)()) == [[0, 1], [2, 3], [4]]
    assert sorted(r.shuffle(nums, 3, seed=1)()) == list(range(5))
    assert list(r.chain(nums, nums)()) == list(range(5)) * 2
    assert list(r.map_readers(lambda a, b: a + b, nums, nums)()) == [0, 2, 4, 6, 8]
    assert list(r.compose(nums, nums)()) == [(i, i) for i in range(5)]
    assert list(r.buffered(nums, 2)()) == list(range(5))
    assert list(r.xmap_readers(lambda v: v * 10, nums, 2, 4, order=True)()) == \
        [0, 10, 20, 30, 40]
    assert sorted(r.xmap_readers(lambda v: v * 10, nums, 2, 4)()) == [0, 10, 20, 30, 40]
    assert list(r.firstn(nums, 2)()) == [0, 1]
    calls = []

    def counted():
        calls.append(1)
        return iter(range(3))
    c = r.cache(counted)
    assert list(c()) == list(c()) == [0, 1, 2] and len(calls) == 1
    with pytest.raises(ValueError, match="different lengths"):
        list(r.compose(nums, lambda: iter(range(2)))())
