"""Threads that build programs side by side (each under its own program_guard and
unique_name.guard, as a job's servers and trainers do when run as threads of one process)
never add layers to each other's programs or take each other's names; the main thread's
guards still hold for the whole process, as in Fluid."""
import sys
import threading

import loom as fluid


def _build(hidden):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        h = fluid.layers.fc(x, size=hidden, act="relu")
        h = fluid.layers.fc(h, size=hidden, act="tanh")
        loss = fluid.layers.mean(fluid.layers.fc(h, size=1))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup


def _signature(program):
    block = program.global_block()
    return ([op.type for op in block.ops],
            sorted((v.name, tuple(v.shape)) for v in block.vars.values()))


def test_threads_building_side_by_side_keep_their_own_programs():
    want = {h: (_signature(m), _signature(s)) for h in (3, 5, 7, 9)
            for m, s in [_build(h)]}
    errors = []

    def worker(hidden):
        try:
            for _ in range(15):
                main, startup = _build(hidden)
                got = (_signature(main), _signature(startup))
                if got != want[hidden]:
                    errors.append((hidden, got, want[hidden]))
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((hidden, e))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=worker, args=(h,)) for h in (3, 5, 7, 9) * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]


def test_main_thread_guards_hold_for_the_process():
    main = fluid.Program()
    seen = []
    with fluid.program_guard(main):
        t = threading.Thread(target=lambda: seen.append(fluid.default_main_program()))
        t.start()
        t.join(10)
    assert seen == [main]
    assert fluid.default_main_program() is not main


def test_a_thread_guard_holds_for_that_thread_only():
    mine, inside, outside = fluid.Program(), [], []
    entered, leave = threading.Event(), threading.Event()

    def worker():
        with fluid.program_guard(mine):
            inside.append(fluid.default_main_program())
            entered.set()
            leave.wait(10)
        inside.append(fluid.default_main_program())

    t = threading.Thread(target=worker)
    t.start()
    assert entered.wait(10)
    outside.append(fluid.default_main_program())
    leave.set()
    t.join(10)
    assert inside[0] is mine and inside[1] is not mine
    assert outside[0] is not mine
