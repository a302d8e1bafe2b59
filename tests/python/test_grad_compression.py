"""Gradient compression (BuildStrategy.gradient_compression = "fp16", `loom transpile
--grad-compression fp16`): float32 gradients cross between the places as float16. On a
learnable task the MLP and the CNN trained on 4 CPU places end where float32 training ends,
within the run-to-run noise (the spread of float32 runs over seeds); misuse is a clear error."""
import numpy as np
import pytest

import loom as fluid
from loom import core

import test_data_parallel as dp

SEEDS = range(1, 5)
STEPS, ROWS, PLACES = 40, 32, 4


def task(model, seed):
    """Batches labelled by a fixed linear teacher (so there is something to learn), and a
    held-out batch."""
    rng = np.random.RandomState(seed)
    dim = 2 * 8 * 8 if model == "cnn" else 12
    teacher = np.random.RandomState(99).randn(dim, 4)

    def batch(n):
        x = rng.randn(n, dim).astype("float32")
        y = np.argmax(x @ teacher, axis=1).reshape(n, 1).astype("int64")
        return (x.reshape(n, 2, 8, 8) if model == "cnn" else x), y
    return [batch(ROWS) for _ in range(STEPS)], batch(512)


def train(model, compression, seed):
    """(held-out loss, final parameters, compressed calls) after STEPS steps on PLACES places."""
    main, startup, loss = dp.build(model, "adam", seed=seed)
    test = main.clone(for_test=True)
    data, held = task(model, seed)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.gradient_compression = compression
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(PLACES))
    core.reset_collective_op_stats()
    for x, y in data:
        exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    calls = core.collective_op_stats()["compressed_calls"]
    held_loss, = exe.run(test, feed={"x": held[0], "y": held[1]}, fetch_list=[loss],
                         scope=scope)
    params = {n: np.array(scope.find_var(n).get_tensor()) for n in dp.params_of(main)}
    return float(np.mean(held_loss)), params, calls


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_fp16_exchange_converges_like_float32(model):
    fp32, fp16 = [], []
    for seed in SEEDS:
        a, pa, calls_a = train(model, None, seed)
        b, pb, calls_b = train(model, "fp16", seed)
        assert calls_a == 0 and calls_b == STEPS * PLACES  # one fused bucket per rank and step
        # The exchange really went through float16: the parameters differ from float32's.
        assert any(not np.array_equal(pa[n], pb[n]) for n in pa)
        fp32.append(a)
        fp16.append(b)
    fp32, fp16 = np.array(fp32), np.array(fp16)
    noise = fp32.std()
    assert noise > 0
    # Per seed, float16 lands well inside float32's seed-to-seed spread (measured: the
    # differences are 1e-6 to 2e-4, the spread 0.01 to 0.06).
    assert np.max(np.abs(fp16 - fp32)) < 0.25 * noise, (fp32, fp16)
    assert fp16.mean() < np.log(4)  # it learned (chance is ln 4)


def test_the_transpiled_allreduce_carries_the_wire_dtype():
    main, startup, loss = dp.build("mlp", "sgd")
    for comp, want in [("fp16", "fp16"), ("", "")]:
        _, mains, _ = core.transpile_data_parallel(core.ProgramDesc(), main.desc, 2,
                                                   grad_compression=comp)
        block = mains[0].block(0)
        ops = [block.op(i) for i in range(block.op_size())]
        wires = [op.attr("wire_dtype") if op.has_attr("wire_dtype") else ""
                 for op in ops if op.type() == "allreduce"]
        assert wires and all(w == want for w in wires)


@pytest.mark.parametrize("kwargs,match", [
    ({"grad_compression": "bf16"}, "bf16 is not built yet"),
    ({"grad_compression": "int8"}, "must be fp16"),
    ({"grad_compression": "fp16", "mode": "owner"}, "allreduce mode"),
])
def test_misuse_is_a_clear_error(kwargs, match):
    main, startup, loss = dp.build("mlp", "sgd")
    with pytest.raises(Exception, match=match):
        core.transpile_data_parallel(core.ProgramDesc(), main.desc, 2, **kwargs)
