"""fluid.install_check.run_check(): trains a tiny program on every place this process has (cpu:0
and each visible GPU), then on 2 CPU places data-parallel, and checks the results against each
other. Prints Fluid's success lines; raises RuntimeError naming the place that failed."""
import numpy as np

from . import core
from .compiler import CompiledProgram
from .executor import Executor
from .framework import Program, program_guard
from .scope import Scope, scope_guard

__all__ = ["run_check"]


def _build():
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 1
    from . import layers, optimizer, unique_name
    with program_guard(main, startup), unique_name.guard():
        x = layers.data("x", [4])
        y = layers.data("y", [1])
        pred = layers.fc(x, 1, param_attr="install_check_w", bias_attr="install_check_b")
        loss = layers.mean(layers.square_error_cost(pred, y))
        optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def _data():
    rng = np.random.RandomState(0)
    x = rng.rand(8, 4).astype("float32")
    y = (x.sum(axis=1, keepdims=True) * 0.5).astype("float32")
    return {"x": x, "y": y}


def _train(place, parallel_places=None, steps=5):
    """Losses of `steps` steps on one place, or data-parallel on parallel_places."""
    main, startup, loss = _build()
    exe = Executor(place)
    losses = []
    with scope_guard(Scope()):
        exe.run(startup)
        program = main
        if parallel_places is not None:
            program = CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                               places=parallel_places)
        for _ in range(steps):
            (value,) = exe.run(program, feed=_data(), fetch_list=[loss])
            losses.append(float(np.mean(value)))
    return losses


def _check(what, losses, reference=None):
    if not all(np.isfinite(losses)):
        raise RuntimeError("install check failed on %s: the loss is not finite (%s)"
                           % (what, losses))
    if not losses[-1] < losses[0]:
        raise RuntimeError("install check failed on %s: the loss did not fall (%s)"
                           % (what, losses))
    if reference is not None and not np.allclose(losses, reference, rtol=1e-4, atol=1e-6):
        raise RuntimeError("install check failed on %s: losses %s differ from cpu:0's %s"
                           % (what, losses, reference))


def run_check():
    """Runs the check and prints what worked; raises RuntimeError (naming the place) when a
    place fails to run or trains differently from cpu:0."""
    print("Running Verify Loom Program ... ")
    places = [core.Place.cpu(0)]
    if core.is_compiled_with_cuda():
        places += [core.Place.cuda(i) for i in range(core.cuda_device_count())]
    reference = None
    for place in places:
        try:
            losses = _train(place)
        except core.LoomError as e:
            raise RuntimeError("install check failed on %r: %s" % (place, e)) from e
        _check(repr(place), losses, reference)
        reference = reference or losses
    print("Your Loom works well on SINGLE GPU or CPU (%s)."
          % ", ".join(repr(p) for p in places))
    cpus = [core.Place.cpu(0), core.Place.cpu(1)]
    try:
        losses = _train(core.Place.cpu(0), parallel_places=cpus)
    except core.LoomError as e:
        raise RuntimeError("install check failed on 2 CPU places data-parallel: %s" % e) from e
    _check("2 CPU places data-parallel", losses, reference)
    print("Your Loom works well on MULTIPLE GPU or CPU (2 CPU places, data-parallel).")
    print("Your Loom is installed successfully! Let's start deep learning with Loom now.")
