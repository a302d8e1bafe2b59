"""A save into a directory that holds a complete checkpoint, killed (SIGKILL) at many points of
the save, leaves a directory that loads: the previous checkpoint whole, or the new one whole,
never a mix and never nothing (save_params / save_persistables, whose parameter-server half
saves through the same function on each server, and save_inference_model)."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import loom as fluid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from checkpoint_writer import PARAMS, build  # noqa: E402

KILL_POINTS = 10


def _env():
    root = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([root, HERE]))


def _write(dirname, value, kind, kill_after=None):
    """Runs checkpoint_writer.py; kill_after: SIGKILL it that many seconds after the save began.
    Returns the save's duration (None when killed before it ended)."""
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "checkpoint_writer.py"), dirname,
                          str(value), kind], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        line = p.stdout.readline()  # "saving": the next line comes when the save is done
        assert line.strip() == "saving", line
        if kill_after is not None:
            time.sleep(kill_after)
            p.send_signal(signal.SIGKILL)
        out = p.stdout.read()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    return float(out.split()[1]) if out.startswith("saved") else None


def _load(dirname, kind):
    """The one value every variable holds after loading dirname (fails on a mix)."""
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        if kind == "params":
            prog, startup, _ = build()
            exe.run(startup)
            fluid.io.load_params(exe, dirname, prog)
        else:
            fluid.io.load_inference_model(dirname, exe)
        values = {float(np.array(scope.find_var("w%d" % i).get_tensor()).flat[k])
                  for i in range(PARAMS) for k in (0, -1)}
    assert len(values) == 1, "the checkpoint mixes saves: %s" % sorted(values)
    return values.pop()


@pytest.mark.parametrize("kind", ["params", "inference"])
def test_a_killed_resave_leaves_a_loadable_checkpoint(kind, tmp_path):
    dirname = str(tmp_path / "ckpt")
    os.makedirs(dirname)
    with open(os.path.join(dirname, "notes.txt"), "w") as f:  # the user's own file
        f.write("mine")
    took = _write(dirname, 1.0, kind)
    assert took is not None and _load(dirname, kind) == 1.0
    took = max(took, _write(dirname, 2.0, kind))
    assert _load(dirname, kind) == 2.0
    last, seen_new, seen_old = 2.0, 0, 0
    for i in range(KILL_POINTS):
        value = 3.0 + i
        # From just after the save began to just past its measured length.
        delay = took * (0.05 + 1.1 * i / (KILL_POINTS - 1))
        _write(dirname, value, kind, kill_after=delay)
        got = _load(dirname, kind)
        assert got in (last, value), (i, delay, got, last, value)
        seen_new += got == value
        seen_old += got == last
        last = got
        with open(os.path.join(dirname, "notes.txt")) as f:
            assert f.read() == "mine"
    # What is left beside the directory: nothing of the killed saves once a save has run again
    # (the next save removes the staging directories of processes that are gone).
    _write(dirname, 100.0, kind)
    assert _load(dirname, kind) == 100.0
    leftovers = [n for n in os.listdir(str(tmp_path)) if n != "ckpt"]
    assert leftovers == [], leftovers
    assert seen_old > 0, "no kill landed inside a save (took %.3f s)" % took
