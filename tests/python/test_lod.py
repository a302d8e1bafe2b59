"""LoD tensors end to end: creating them, feeding variable-length sequences (create_lod_tensor
and DataFeeder), LoD carried through ops and fetched, the sequence layers against NumPy, a
bag-of-words classifier trained on sequences, and data parallelism that splits a LoD batch by
whole sequences."""
import numpy as np
import pytest

import loom as fluid
from loom import core

L = fluid.layers


def test_create_and_inspect():
    t = fluid.create_lod_tensor(np.arange(12, dtype="float32").reshape(6, 2), [[2, 1, 3]],
                                fluid.CPUPlace())
    assert t.lod() == [[0, 2, 3, 6]] and t.recursive_sequence_lengths() == [[2, 1, 3]]
    assert t.has_valid_recursive_sequence_lengths()
    ids = fluid.create_lod_tensor([[1, 2], [3], [4, 5, 6]], [[2, 1, 3]], fluid.CPUPlace())
    assert np.array(ids).ravel().tolist() == [1, 2, 3, 4, 5, 6]
    two = fluid.create_lod_tensor(np.zeros((5, 1), "int64"), [[2, 1], [1, 2, 2]],
                                  fluid.CPUPlace())
    assert two.lod() == [[0, 2, 3], [0, 1, 3, 5]]
    r = fluid.create_random_int_lodtensor([[3, 2]], [1], fluid.CPUPlace(), 0, 9)
    assert np.array(r).shape == (5, 1) and r.lod() == [[0, 3, 5]]
    with pytest.raises(ValueError, match="sums to 3, but the data has 6"):
        fluid.create_lod_tensor(np.zeros((6, 1)), [[1, 2]], fluid.CPUPlace())


def seq_program(pool):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2], lod_level=1)
        scaled = L.scale(x, 3.0)
        return main, startup, scaled, L.sequence_pool(scaled, pool), L.sequence_softmax(
            L.reduce_sum(x, dim=1, keep_dim=True))


@pytest.mark.parametrize("pool", ["sum", "average", "sqrt", "max", "last", "first"])
def test_sequence_layers_match_numpy_and_carry_lod(pool):
    x = np.random.RandomState(0).randn(6, 2).astype("float64").astype("float32")
    lens = [2, 1, 3]
    main, startup, scaled, pooled, soft = seq_program(pool)
    exe = fluid.Executor(fluid.CPUPlace())
    t = fluid.create_lod_tensor(x, [lens], fluid.CPUPlace())
    s, p, sm = exe.run(main, feed={"x": t}, fetch_list=[scaled, pooled, soft], return_numpy=False)
    assert s.lod() == [[0, 2, 3, 6]] and sm.lod() == [[0, 2, 3, 6]] and p.lod() == []
    off = [0, 2, 3, 6]
    fn = {"sum": lambda a: a.sum(0), "average": lambda a: a.mean(0),
          "sqrt": lambda a: a.sum(0) / np.sqrt(len(a)), "max": lambda a: a.max(0),
          "last": lambda a: a[-1], "first": lambda a: a[0]}[pool]
    want = np.stack([fn(3 * x[off[i]:off[i + 1]]) for i in range(3)])
    np.testing.assert_allclose(np.array(p), want, rtol=1e-5)
    rs = x.sum(1)
    want_sm = np.concatenate([np.exp(rs[off[i]:off[i + 1]]) / np.exp(rs[off[i]:off[i + 1]]).sum()
                              for i in range(3)])
    np.testing.assert_allclose(np.array(sm).ravel(), want_sm, rtol=1e-5)


def test_pad_unpad_mask_and_the_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 1], lod_level=1)
        padded, length = L.sequence_pad(x, L.fill_constant([1], "float32", -1.0))
        back = L.sequence_unpad(padded, length)
        mask = L.sequence_mask(length, dtype="float32")
    exe = fluid.Executor(fluid.CPUPlace())
    t = fluid.create_lod_tensor(np.arange(4, dtype="float32").reshape(4, 1), [[1, 3]],
                                fluid.CPUPlace())
    p, n, b, m = exe.run(main, feed={"x": t}, fetch_list=[padded, length, back, mask],
                         return_numpy=False)
    np.testing.assert_array_equal(np.array(p)[:, :, 0], [[0, -1, -1], [1, 2, 3]])
    np.testing.assert_array_equal(np.array(n), [1, 3])
    assert b.lod() == [[0, 1, 4]] and np.array(b).ravel().tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.array(m), [[1, 0, 0], [1, 1, 1]])
    with pytest.raises(core.InvalidArgumentError, match="has no LoD, the program declares"):
        exe.run(main, feed={"x": np.zeros((4, 1), "float32")}, fetch_list=[padded])
    bad = fluid.create_lod_tensor(np.zeros((4, 1), "float32"), [[1, 3]], fluid.CPUPlace())
    bad.set_lod([[0, 3, 2]])
    with pytest.raises(core.InvalidArgumentError, match="decreases"):
        exe.run(main, feed={"x": bad}, fetch_list=[padded])


def bow_model(dict_size=20):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = fluid.data("words", [None, 1], dtype="int64", lod_level=1)
        label = fluid.data("label", [None, 1], dtype="int64")
        emb = L.embedding(words, [dict_size, 8])
        bow = L.sequence_pool(emb, "average")
        logits = L.fc(bow, 2)
        loss = L.mean(L.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.SGD(0.5).minimize(loss)
    return main, startup, words, label, loss


def sentences(n, seed):
    """Sentences of 1-6 words; label 1 when word 3 appears (a learnable bag-of-words rule)."""
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        s = rng.randint(0, 20, size=rng.randint(1, 7)).tolist()
        out.append((s, [int(3 in s)]))
    return out


def test_data_feeder_packs_sequences_and_a_bag_of_words_model_learns():
    main, startup, words, label, loss = bow_model()
    feeder = fluid.DataFeeder([words, label], fluid.CPUPlace())
    batch = sentences(4, 1)
    fed = feeder.feed(batch)
    assert fed["words"].recursive_sequence_lengths() == [[len(s) for s, _ in batch]]
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = [float(exe.run(main, feed=feeder.feed(sentences(32, 100 + i)),
                                fetch_list=[loss])[0][0]) for i in range(150)]
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10]), (losses[:10], losses[-10:])


def test_two_places_split_by_whole_sequences_and_match_one_place():
    feeder_batches = [sentences(6, 7 + i) for i in range(3)]
    results = []
    for places in (1, 2):
        main, startup, words, label, loss = bow_model()
        feeder = fluid.DataFeeder([words, label], fluid.CPUPlace())
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            prog = main if places == 1 else fluid.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, places=fluid.cpu_places(2))
            results.append([float(np.mean(exe.run(prog, feed=feeder.feed(b),
                                                  fetch_list=[loss])[0]))
                            for b in feeder_batches])
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)
