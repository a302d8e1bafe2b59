"""save_inference_model / load_inference_model as Fluid saves them: the pruned inference program,
only the parameters it reads, model_filename and the combined params_filename file, and the
`loom inspect` / `loom run` commands on the directory they write."""
import os
import subprocess

import numpy as np
import pytest

import loom as fluid
from loom import core


def cnn():
    """A small CNN trained with Adam: conv, pool, batch norm, dropout, fc; accuracy and loss."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.layers.data("img", [1, 8, 8])
        label = fluid.layers.data("label", [1], dtype="int64")
        conv = fluid.layers.conv2d(img, 4, 3, padding=1, act="relu")
        pool = fluid.layers.pool2d(conv, 2, pool_stride=2)
        bn = fluid.layers.batch_norm(pool)
        drop = fluid.layers.dropout(bn, 0.2)
        prob = fluid.layers.fc(drop, 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        acc = fluid.layers.accuracy(prob, label)
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup, prob, loss, acc


def data(n=16, seed=0):
    rng = np.random.RandomState(seed)
    return (rng.rand(n, 1, 8, 8).astype("float32"),
            rng.randint(0, 3, (n, 1)).astype("int64"))


def with_label(img):
    """A feed for the training program's test clone: it still computes the loss."""
    return {"img": img, "label": np.zeros((len(img), 1), "int64")}


def trained(scope):
    main, startup, prob, loss, acc = cnn()
    exe = fluid.Executor(fluid.CPUPlace())
    img, label = data()
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(3):
            exe.run(main, feed={"img": img, "label": label}, fetch_list=[loss])
    return main, prob, exe


def inference_needs(main, prob):
    """The variables the forward computation of prob reads or writes, found independently of
    save_inference_model: walk the test-mode forward ops backwards from prob."""
    test = main.clone(for_test=True)
    needed, kept = {prob.name}, set()
    for op in reversed(test.global_block().ops):
        if needed.intersection(op.output_arg_names):
            kept.update(op.output_arg_names)
            kept.update(op.input_arg_names)
            needed.update(op.input_arg_names)
    return {n for n in kept if main.global_block().has_var(n)}  # not @EMPTY@


def saved_vars(path):
    desc = core.ProgramDesc.load(path)
    return {v.name(): v for v in desc.block(0).all_vars()}


def test_saved_program_holds_exactly_what_inference_needs(tmp_path):
    scope = core.Scope()
    main, prob, exe = trained(scope)
    img, _ = data(8, seed=1)
    with fluid.scope_guard(scope):
        test = main.clone(for_test=True)
        (want,) = exe.run(test, feed=with_label(img), fetch_list=[prob])
        fluid.io.save_inference_model(str(tmp_path / "m"), ["img"], [prob], exe, main)
    names = set(saved_vars(str(tmp_path / "m" / "main.pb")))
    assert names == inference_needs(main, prob)
    assert "label" not in names
    assert not [n for n in names if "@GRAD" in n or "moment" in n or "beta" in n and "pow" in n]
    # params/ holds exactly the persistable variables the program reads: parameters and batch
    # norm's running statistics, no Adam state or learning rate.
    persistable = {n for n, v in saved_vars(str(tmp_path / "m" / "main.pb")).items()
                   if v.persistable()}
    files = set(os.listdir(str(tmp_path / "m" / "params"))) - {"CHECKPOINT"}
    assert files == persistable
    assert not [f for f in files if "moment" in f or "pow_acc" in f or "learning_rate" in f]
    params = {p.name for p in main.global_block().all_parameters()}
    assert params <= files
    with fluid.scope_guard(core.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "m"), exe)
        assert feeds == ["img"] and [f.name for f in fetches] == [prob.name]
        (got,) = exe.run(program, feed={"img": img}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_feeds_cut_the_graph(tmp_path):
    """Feeding an intermediate variable saves only what follows it (Fluid's feed pruning)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        h = fluid.layers.fc(x, 5, act="relu")
        y = fluid.layers.fc(h, 2)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(core.Scope()):
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path / "m"), [h.name], [y], exe, main)
    names = set(saved_vars(str(tmp_path / "m" / "main.pb")))
    assert "x" not in names and "fc_0.w_0" not in names
    assert {h.name, y.name, "fc_1.w_0", "fc_1.b_0"} <= names
    assert sorted(os.listdir(str(tmp_path / "m" / "params"))) == ["CHECKPOINT", "fc_1.b_0",
                                                                  "fc_1.w_0"]


@pytest.mark.parametrize("model_filename", [None, "__model__"])
def test_combined_params_file_round_trip(tmp_path, model_filename):
    scope = core.Scope()
    main, prob, exe = trained(scope)
    img, _ = data(8, seed=2)
    d = str(tmp_path / "m")
    with fluid.scope_guard(scope):
        (want,) = exe.run(main.clone(for_test=True), feed=with_label(img), fetch_list=[prob])
        fluid.io.save_inference_model(d, ["img"], [prob], exe, main,
                                      model_filename=model_filename,
                                      params_filename="__params__")
    assert not os.path.exists(os.path.join(d, "params"))
    assert os.path.isfile(os.path.join(d, "__params__"))
    assert os.path.isfile(os.path.join(d, model_filename or "main.pb"))
    # Sorted by name, as Fluid's save_combine writes them, and only what the program reads.
    entries = [name for name, _ in core.read_params_combined(os.path.join(d, "__params__"))]
    persistable = sorted(n for n, v in saved_vars(os.path.join(d, model_filename or "main.pb"))
                         .items() if v.persistable())
    assert entries == persistable
    with fluid.scope_guard(core.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(
            d, exe, model_filename=model_filename, params_filename="__params__")
        (got,) = exe.run(program, feed={"img": img}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Loading without the names it was saved with says which names to pass.
    with fluid.scope_guard(core.Scope()):
        if model_filename:
            with pytest.raises(FileNotFoundError, match="model_filename='__model__'"):
                fluid.io.load_inference_model(d, exe, params_filename="__params__")
        with pytest.raises(FileNotFoundError, match="params_filename='__params__'"):
            fluid.io.load_inference_model(d, exe, model_filename=model_filename)


def test_saving_one_layout_over_the_other_leaves_no_stale_files(tmp_path):
    scope = core.Scope()
    main, prob, exe = trained(scope)
    d = str(tmp_path / "m")
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(d, ["img"], [prob], exe, main)
        fluid.io.save_inference_model(d, ["img"], [prob], exe, main,
                                      model_filename="__model__", params_filename="__params__")
    assert sorted(os.listdir(d)) == ["__model__", "__params__", "bundle.pbtxt"]


def test_missing_or_corrupt_combined_file_is_named(tmp_path):
    scope = core.Scope()
    main, prob, exe = trained(scope)
    d = str(tmp_path / "m")
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(d, ["img"], [prob], exe, main, params_filename="__params__")
    path = os.path.join(d, "__params__")
    with fluid.scope_guard(core.Scope()):
        with pytest.raises(Exception, match="other_params.*does not exist"):
            fluid.io.load_inference_model(d, exe, params_filename="other_params")
    raw = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(raw[:len(raw) // 2])
    with fluid.scope_guard(core.Scope()):
        with pytest.raises(Exception, match=path.replace("/", ".")):
            fluid.io.load_inference_model(d, exe, params_filename="__params__")
    with open(path, "wb") as f:
        f.write(raw[:100] + bytes([raw[100] ^ 1]) + raw[101:])
    with fluid.scope_guard(core.Scope()):
        with pytest.raises(Exception, match="__params__.*checksum"):
            fluid.io.load_inference_model(d, exe, params_filename="__params__")


def test_bad_file_names_are_refused(tmp_path):
    scope = core.Scope()
    main, prob, exe = trained(scope)
    with fluid.scope_guard(scope):
        for kw in ({"model_filename": "a/b"}, {"params_filename": ""},
                   {"model_filename": "x", "params_filename": "x"},
                   {"params_filename": "bundle.pbtxt"}):
            with pytest.raises(ValueError):
                fluid.io.save_inference_model(str(tmp_path / "m"), ["img"], [prob], exe, main,
                                              **kw)


def test_save_and_load_params_with_filename(tmp_path):
    """save_params / save_vars / load_vars with filename write and read one combined file."""
    scope = core.Scope()
    main, prob, exe = trained(scope)
    with fluid.scope_guard(scope):
        fluid.io.save_params(exe, str(tmp_path / "ckpt"), main, filename="all")
        before = {n: np.array(scope.find_var(n).get_tensor())
                  for n in ("conv2d_0.w_0", "fc_0.w_0")}
    assert os.listdir(str(tmp_path / "ckpt")) == ["all"]
    fresh = core.Scope()
    with fluid.scope_guard(fresh):
        fluid.io.load_params(exe, str(tmp_path / "ckpt"), main, filename="all")
        for n, v in before.items():
            np.testing.assert_array_equal(np.array(fresh.find_var(n).get_tensor()), v)


def loom_cli():
    build = os.environ.get("LOOM_BUILD_DIR",
                           os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    return os.path.abspath(os.path.join(build, "tools", "loom"))


@pytest.mark.parametrize("names", [{}, {"model_filename": "__model__",
                                        "params_filename": "__params__"}])
def test_cli_inspects_and_runs_the_model_directory(tmp_path, names):
    scope = core.Scope()
    main, prob, exe = trained(scope)
    img, _ = data(4, seed=3)
    d = str(tmp_path / "m")
    with fluid.scope_guard(scope):
        (want,) = exe.run(main.clone(for_test=True), feed=with_label(img), fetch_list=[prob])
        fluid.io.save_inference_model(d, ["img"], [prob], exe, main, **names)
    np.save(str(tmp_path / "img.npy"), img)
    r = subprocess.run([loom_cli(), "inspect", d], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "verified: ok" in r.stdout and "conv2d(" in r.stdout and "adam" not in r.stdout
    r = subprocess.run([loom_cli(), "run", d, "--iters", "1", "--feed",
                        "img=%s" % (tmp_path / "img.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # The first fetch's first value is printed: the model's prediction for the first row.
    assert "%.6g" % want[0, 0] in r.stdout, (r.stdout, want[0, 0])
    # A feed the program lacks is named with the model file the user saved.
    r = subprocess.run([loom_cli(), "run", d, "--iters", "1", "--feed",
                        "nope=%s" % (tmp_path / "img.npy")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "'nope'" in r.stderr and os.path.join(d, names.get("model_filename", "main.pb")) \
        in r.stderr, r.stderr


def test_cli_names_the_directory_and_the_missing_model_file(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([loom_cli(), "inspect", str(empty)], capture_output=True, text=True)
    assert r.returncode == 1 and str(empty) in r.stderr and "main.pb" in r.stderr, r.stderr
    scope = core.Scope()
    main, prob, exe = trained(scope)
    d = str(tmp_path / "m")
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(d, ["img"], [prob], exe, main, model_filename="__model__")
    os.remove(os.path.join(d, "__model__"))
    for cmd in ("inspect", "run"):
        r = subprocess.run([loom_cli(), cmd, d], capture_output=True, text=True)
        assert r.returncode == 1, r.stderr
        assert "__model__" in r.stderr and "bundle.pbtxt" in r.stderr, r.stderr


def test_a_single_target_and_a_single_feed_name(tmp_path):
    """Fluid's book calls save_inference_model(dir, ["words"], prediction, exe) with one
    Variable as the target (and Fluid also takes one feed name): both are wrapped in a list."""
    scope = core.Scope()
    main, prob, exe = trained(scope)
    with fluid.scope_guard(scope):
        got = fluid.io.save_inference_model(str(tmp_path / "one"), "img", prob, exe, main)
        both = fluid.io.save_inference_model(str(tmp_path / "list"), ["img"], [prob], exe, main)
    assert got == both == [prob.name]
    assert set(saved_vars(str(tmp_path / "one" / "main.pb"))) == \
        set(saved_vars(str(tmp_path / "list" / "main.pb")))
