"""gather_tree, BeamSearchDecoder and dynamic_decode against a NumPy beam search with the same
semantics (Fluid 1.8's: log-softmax scores summed along the beam, finished beams extend only
with end_token at no cost, lengths count the end token), in float64 so ids must agree."""
import numpy as np
import pytest

import loom as fluid
from loom import layers as L

B, H, E, V, K, T = 3, 5, 4, 7, 3, 6
START, END = 0, 1


def np_log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def np_gather_tree(ids, parents):
    out = np.empty_like(ids)
    steps, batch, beam = ids.shape
    for b in range(batch):
        for k in range(beam):
            src = k
            for t in range(steps - 1, -1, -1):
                out[t, b, k] = ids[t, b, src]
                src = parents[t, b, src]
    return out


def np_beam_search(p, h0, beam, steps):
    """p: the model's weights (emb, w, u, o); the cell is h' = tanh(emb[x] w + h u), logits
    h' o. Returns ids [batch, time, beam] (backtraced), scores [batch, beam], lengths."""
    batch = h0.shape[0]
    h = np.repeat(h0, beam, axis=0)
    lp = np.zeros((batch, beam))
    lp[:, 1:] = -1e9
    fin = np.zeros((batch, beam))
    lens = np.zeros((batch, beam), np.int64)
    tok = np.full((batch, beam), START)
    ids, parents = [], []
    for _ in range(steps):
        h = np.tanh(p["emb"][tok.reshape(-1)] @ p["w"] + h @ p["u"])
        step = np_log_softmax(h @ p["o"]).reshape(batch, beam, -1)
        noend = np.full(step.shape[-1], -1e9)
        noend[END] = 0.0
        step = np.where(fin[..., None] > 0, noend, step)
        flat = (step + lp[..., None]).reshape(batch, -1)
        idx = np.argsort(-flat, axis=1, kind="stable")[:, :beam]
        lp = np.take_along_axis(flat, idx, axis=1)
        src, tok = idx // step.shape[-1], idx % step.shape[-1]
        rows = (src + np.arange(batch)[:, None] * beam).reshape(-1)
        h = h[rows]
        was = fin.reshape(-1)[rows].reshape(batch, beam)
        lens = lens.reshape(-1)[rows].reshape(batch, beam) + (1 - was).astype(np.int64)
        fin = np.maximum(was, tok == END)
        ids.append(tok)
        parents.append(src)
    path = np_gather_tree(np.array(ids), np.array(parents))
    return path.transpose(1, 0, 2), lp, lens


class TanhCell(L.RNNCell):
    """h' = tanh(x w + h u), its parameters made on the first call and shared after."""

    def __init__(self, p):
        self.p, self.w, self.u = p, None, None

    def call(self, inputs, states):
        if self.w is None:
            init = fluid.initializer.NumpyArrayInitializer
            self.w = L.create_parameter([E, H], "float64", name="cell_w",
                                        default_initializer=init(self.p["w"]))
            self.u = L.create_parameter([H, H], "float64", name="cell_u",
                                        default_initializer=init(self.p["u"]))
        h = L.tanh(L.elementwise_add(L.matmul(inputs, self.w), L.matmul(states, self.u)))
        return h, h


def weights(seed):
    rng = np.random.RandomState(seed)
    p = {"emb": rng.randn(V, E), "w": rng.randn(E, H), "u": rng.randn(H, H) * 0.5,
         "o": rng.randn(H, V) * 1.5}
    # NumpyArrayInitializer holds float32 values (assign_value's fp32_values, as Paddle's)
    return {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}


def model(p):
    """The feed h0, the embedding and output weights from p, and the cell."""
    h = fluid.data("h0", [None, H], dtype="float64")
    init = fluid.initializer.NumpyArrayInitializer
    emb_w = L.create_parameter([V, E], "float64", name="emb", default_initializer=init(p["emb"]))
    out_w = L.create_parameter([H, V], "float64", name="out", default_initializer=init(p["o"]))
    return h, emb_w, out_w, TanhCell(p)


def build_and_run(p, h0, beam, steps, return_length=True, time_major=False):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        h, emb_w, out_w, cell = model(p)

        def embed(ids):
            return L.gather(emb_w, L.reshape(ids, [-1]))

        def project(x):
            return L.matmul(x, out_w)

        decoder = L.BeamSearchDecoder(cell, START, END, beam, embedding_fn=embed,
                                      output_fn=project)
        result = L.dynamic_decode(decoder, inits=h, max_step_num=steps,
                                  output_time_major=time_major, return_length=return_length)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fetch = [result[0], result[1].log_probs] + ([result[2]] if return_length else [])
        return exe.run(main, feed={"h0": h0}, fetch_list=fetch)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_matches_numpy(seed):
    p = weights(seed)
    h0 = np.random.RandomState(10 + seed).randn(B, H)
    ids, scores, lens = build_and_run(p, h0, K, T)
    want_ids, want_scores, want_lens = np_beam_search(p, h0, K, T)
    assert ids.shape == (B, T, K)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(lens, want_lens)
    # a beam that emitted end_token keeps emitting it (Fluid's padding) and its score stays
    for b in range(B):
        for k in range(K):
            ended = np.nonzero(ids[b, :, k] == END)[0]
            if len(ended):
                assert np.all(ids[b, ended[0]:, k] == END)
                assert lens[b, k] == ended[0] + 1
            else:
                assert lens[b, k] == T


def test_some_beams_finish_early():
    # The end token's logit is large from the start: every beam has ended within T steps.
    p = weights(3)
    p["o"][:, END] += 2.0
    h0 = np.random.RandomState(4).randn(B, H)
    ids, _, lens = build_and_run(p, h0, K, T)
    want_ids, _, want_lens = np_beam_search(p, h0, K, T)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(lens, want_lens)
    assert lens.min() < T


def test_beam_one_is_greedy_and_time_major():
    p = weights(5)
    h0 = np.random.RandomState(6).randn(B, H)
    ids, _ = build_and_run(p, h0, 1, T, return_length=False, time_major=True)
    assert ids.shape == (T, B, 1)
    h, tok, fin, greedy = h0.copy(), np.full(B, START), np.zeros(B, bool), []
    for _ in range(T):
        h = np.tanh(p["emb"][tok] @ p["w"] + h @ p["u"])
        tok = np.where(fin, END, np.argmax(h @ p["o"], axis=1))
        fin |= tok == END
        greedy.append(tok)
    np.testing.assert_array_equal(ids[:, :, 0], np.array(greedy))


def test_gather_tree_layer():
    rng = np.random.RandomState(0)
    ids = rng.randint(0, 9, size=(5, 4, 3)).astype("int64")
    parents = rng.randint(0, 3, size=(5, 4, 3)).astype("int64")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = fluid.data("ids", [5, 4, 3], dtype="int64")
        pa = fluid.data("parents", [5, 4, 3], dtype="int64")
        out = L.gather_tree(i, pa)
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed={"ids": ids, "parents": parents},
                                                  fetch_list=[out])
    np.testing.assert_array_equal(got, np_gather_tree(ids, parents))


def test_tile_beam_merge_with_batch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2, 3], dtype="float32")
        y = L.BeamSearchDecoder.tile_beam_merge_with_batch(x, 4)
    xv = np.arange(12, dtype="float32").reshape(2, 2, 3)
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_array_equal(got, np.repeat(xv, 4, axis=0))


def test_bad_arguments_are_named():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        cell = L.GRUCell(4)
        with pytest.raises(ValueError, match="beam_size"):
            L.BeamSearchDecoder(cell, 0, 1, 0)
        h = fluid.data("h", [None, 4], dtype="float32")
        dec = L.BeamSearchDecoder(cell, 0, 1, 2, embedding_fn=lambda i: L.cast(
            L.unsqueeze(i, [2]), "float32"))
        with pytest.raises(ValueError, match="max_step_num"):
            L.dynamic_decode(dec, inits=h, max_step_num=0)
        dec = L.BeamSearchDecoder(cell, 0, 9, 2, embedding_fn=lambda i: L.cast(
            L.unsqueeze(i, [2]), "float32"), output_fn=lambda x: L.fc(x, 5))
        with pytest.raises(ValueError, match="end_token 9 is outside the 5-word output"):
            L.dynamic_decode(dec, inits=h, max_step_num=3)


class GreedyDecoder(L.Decoder):
    """A user-written decoder: greedy decoding over a cell, through dynamic_decode's generic
    path (finished tracking, lengths, impute_finished)."""

    def __init__(self, cell, embed, project):
        self.cell, self.embed, self.project = cell, embed, project

    def initialize(self, inits):
        start = L.fill_constant_batch_size_like(inits, [-1], "int64", START)
        finished = L.cast(L.fill_constant_batch_size_like(inits, [-1], "float32", 0.0), "bool")
        return self.embed(start), inits, finished

    def step(self, time, inputs, states, **kwargs):
        out, new_states = self.cell(inputs, states)
        tok = L.argmax(self.project(out), axis=1)
        done = L.equal(tok, L.fill_constant([1], "int64", END))
        return tok, new_states, self.embed(tok), done


def test_user_decoder_through_dynamic_decode():
    p = weights(7)
    p["o"][:, END] += 1.0  # some rows end early, so impute_finished has work to do
    h0 = np.random.RandomState(8).randn(B, H)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        h, emb_w, out_w, cell = model(p)
        dec = GreedyDecoder(cell, lambda ids: L.gather(emb_w, ids),
                            lambda x: L.matmul(x, out_w))
        toks, final, lens = L.dynamic_decode(dec, inits=h, max_step_num=T, impute_finished=True,
                                             return_length=True)
    with fluid.scope_guard(fluid.Scope()):
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        got, got_final, got_lens = exe.run(main, feed={"h0": h0},
                                           fetch_list=[toks, final, lens])
    # impute_finished: a finished row's state stops changing (its outputs go on)
    state, tok, fin = h0.copy(), np.full(B, START), np.zeros(B, bool)
    want, want_lens = [], np.zeros(B, np.int64)
    for _ in range(T):
        new = np.tanh(p["emb"][tok] @ p["w"] + state @ p["u"])
        tok = np.argmax(new @ p["o"], axis=1)
        want_lens += ~fin
        state = np.where(fin[:, None], state, new)
        fin |= tok == END
        want.append(tok)
    np.testing.assert_array_equal(got, np.array(want).T)
    np.testing.assert_array_equal(got_lens, want_lens)
    np.testing.assert_allclose(got_final, state, rtol=1e-12, atol=1e-14)
    assert want_lens.min() < T, "the case should finish a row early"


class FcCell(L.RNNCell):
    """A cell built from layers.fc (unnamed parameters), as Fluid users write them."""

    def call(self, inputs, states):
        h = L.fc(L.concat([inputs, states], axis=1), H, act="tanh")
        return h, h


def test_layers_in_a_cell_share_parameters_across_unrolled_steps():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 4, E], dtype="float64")
        out, final = L.rnn(FcCell(), x, initial_states=L.fill_constant_batch_size_like(
            x, [-1, H], "float64", 0.0))
        h0 = fluid.data("h0", [None, H], dtype="float64")
        dec = L.BeamSearchDecoder(FcCell(), START, END, 2,
                                  embedding_fn=lambda i: fluid.embedding(i, [V, E],
                                                                         dtype="float64"),
                                  output_fn=lambda h: L.fc(h, V))
        ids, _ = L.dynamic_decode(dec, inits=h0, max_step_num=3)
    params = sorted((p.name, tuple(p.shape)) for p in main.global_block().all_parameters())
    # rnn's cell: one fc (w, b); the decoder's cell: one fc; one embedding; one output fc
    assert len(params) == 7, params
    xv = np.random.RandomState(0).randn(2, 4, E)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        got, = exe.run(main, feed={"x": xv, "h0": np.zeros((2, H))}, fetch_list=[out])
        scope = fluid.global_scope()
        fc_params = [n for n, s in params if s[0] == E + H]
        w = np.array(scope.find_var(fc_params[0]).get_tensor())
        b = np.array(scope.find_var(fc_params[0].replace(".w_0", ".b_0")).get_tensor())
    h, want = np.zeros((2, H)), []
    for t in range(4):
        h = np.tanh(np.concatenate([xv[:, t], h], axis=1) @ w + b)
        want.append(h)
    np.testing.assert_allclose(got, np.stack(want, axis=1), rtol=1e-12, atol=1e-14)


def test_layers_after_an_unrolled_loop_are_named_as_in_fluid():
    # Fluid builds the loop body once: the cell's fc is fc_0 and the next fc is fc_1, however
    # many steps run. The inference program of a seq2seq model relies on it (its output fc is
    # built inside the decoding loop, the training program's after it).
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 5, E], dtype="float32")
        out, _ = L.rnn(FcCell(), x, initial_states=L.fill_constant_batch_size_like(
            x, [-1, H], "float32", 0.0))
        L.fc(out, 3, num_flatten_dims=2)
    names = sorted(p.name for p in main.global_block().all_parameters())
    assert names == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"], names
