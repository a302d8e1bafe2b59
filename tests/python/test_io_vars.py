"""fluid.io's var-level API: save_vars / load_vars with vars or a predicate, fluid.save /
fluid.load (parameters and optimizer state apart), load_program_state / set_program_state,
get_program_parameter / get_program_persistable_vars."""
import os

import numpy as np
import pytest

import loom as fluid


def model():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.optimizer.Adam(0.1).minimize(loss)
    return main, startup, loss


def values(scope, names):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def test_save_and_load_vars_by_list_and_predicate(tmp_path):
    main, startup, loss = model()
    exe = fluid.Executor(fluid.CPUPlace())
    params = [p.name for p in fluid.io.get_program_parameter(main)]
    persist = [v.name for v in fluid.io.get_program_persistable_vars(main)]
    assert set(params) == {"fc_0.w_0", "fc_0.b_0"} and set(params) < set(persist)
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        scope = fluid.global_scope()
        want = values(scope, params)
        fluid.io.save_vars(exe, str(tmp_path / "w"), main, vars=[main.global_block().var(
            "fc_0.w_0")])
        fluid.io.save_vars(exe, str(tmp_path / "p"), main,
                           predicate=lambda v: v.desc.is_parameter())
        assert sorted(os.listdir(tmp_path / "p")) == ["CHECKPOINT", "fc_0.b_0", "fc_0.w_0"]
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        scope = fluid.global_scope()
        scope.find_var("fc_0.w_0").get_tensor().set(np.zeros((3, 2), "float32"),
                                                    fluid.CPUPlace())
        fluid.io.load_vars(exe, str(tmp_path / "p"), main,
                           predicate=lambda v: v.desc.is_parameter())
        for n, v in values(scope, params).items():
            np.testing.assert_array_equal(v, want[n])


def test_fluid_save_load_and_program_state(tmp_path):
    main, startup, loss = model()
    exe = fluid.Executor(fluid.CPUPlace())
    path = str(tmp_path / "model")
    x = np.ones((4, 3), "float32")
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        exe.run(main, feed={"x": x})
        fluid.save(main, path)
        scope = fluid.global_scope()
        names = [v.name for v in fluid.io.get_program_persistable_vars(main)]
        want = values(scope, names)
    assert os.path.isdir(path + ".pdparams") and os.path.isdir(path + ".pdopt")
    assert os.path.isfile(path + ".pdmodel")
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fluid.load(main, path, exe)
        got = values(fluid.global_scope(), names)
        for n in names:
            np.testing.assert_array_equal(got[n], want[n], err_msg=n)
    state = fluid.io.load_program_state(path)
    assert set(state) == set(names)
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        set_names = fluid.io.set_program_state(main, state)
        assert set(set_names) == set(names)
        np.testing.assert_array_equal(
            np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor()), want["fc_0.w_0"])
        state["fc_0.w_0"] = np.zeros((2, 2), "float32")
        with pytest.raises(ValueError, match="'fc_0.w_0' is \\[2, 2\\] in the state"):
            fluid.io.set_program_state(main, state)
    with pytest.raises(FileNotFoundError, match="no .*pdparams"):
        fluid.io.load_program_state(str(tmp_path / "nothing"))
