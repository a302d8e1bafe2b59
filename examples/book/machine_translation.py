#!/usr/bin/python3
"""machine_translation: the book's sequence-to-sequence model with attention (a bidirectional
GRU encoder of layers.rnn, a GRU decoder cell attending over the encoder's outputs, trained with
teacher forcing, translating with BeamSearchDecoder + dynamic_decode), hidden size 64 instead
of 512, on a synthetic language pair (WMT-16 ships in no Debian package): a target sentence is
its source read backwards, every word replaced by its own translation, and where a word
translated to 30 or more is followed by one translated below 13, the two swap places (a
phrase's word order), so the decoder must attend to the right source word at every step.

Loom unrolls layers.rnn and dynamic_decode when it builds the program, so the source and target
lengths are static: sentences are padded to 8 source words and 9 target words (the book's
scripts use [None, None] shapes with Fluid's while loop).

    PYTHONPATH=build/python /usr/bin/python3 examples/book/machine_translation.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

layers = fluid.layers

NAME, BATCH, EPOCHS = "machine_translation", 64, 16
TARGET = ("exact sentence accuracy (beam search)", 0.95, "max")
BOS, EOS, PAD = 0, 1, 2  # the book's <s>, <e> and <unk> ids
SRC_WORDS = TRG_WORDS = 40
SRC_LEN, TRG_LEN = 8, 9  # up to 8 words; the target adds <e> (its input starts with <s>)
HIDDEN, DECODER, BEAM = 64, 64, 4
_rng_words = np.random.RandomState(7)
TRANSLATE = np.concatenate([[BOS, EOS, PAD], 3 + _rng_words.permutation(SRC_WORDS - 3)])
_cache = {}


def translate(src):
    """The synthetic language's translation of a source sentence (list of word ids)."""
    out = [int(TRANSLATE[w]) for w in reversed(src)]
    # a word below 10 followed by a word of 30 or more swaps with it (a phrase's word order)
    i = 0
    while i + 1 < len(out):
        if out[i] >= 30 and out[i + 1] < 13:
            out[i], out[i + 1] = out[i + 1], out[i]
            i += 2
        else:
            i += 1
    return out


def _pairs(split):
    if split not in _cache:
        rng = np.random.RandomState(11 if split == "train" else 12)
        _cache[split] = [
            (src, translate(src)) for src in
            (list(rng.randint(3, SRC_WORDS, size=rng.randint(3, SRC_LEN + 1)))
             for _ in range(6000 if split == "train" else 500))]
    return _cache[split]


def _pad(seqs, length):
    out = np.full((len(seqs), length), PAD, "int64")
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def batches(split, batch_size, seed):
    data = _pairs(split)
    order = np.random.RandomState(seed).permutation(len(data)) if split == "train" else \
        np.arange(len(data))
    for i in range(0, len(data) - batch_size + 1, batch_size):
        rows = [data[j] for j in order[i:i + batch_size]]
        yield {"src": _pad([s for s, _ in rows], SRC_LEN),
               "src_sequence_length": np.array([len(s) for s, _ in rows], "int64"),
               "trg": _pad([[BOS] + t for _, t in rows], TRG_LEN),
               "label": _pad([t + [EOS] for _, t in rows], TRG_LEN),
               "trg_sequence_length": np.array([len(t) + 1 for _, t in rows], "int64")}


def encoder(src_embedding, src_sequence_length):
    fwd_output, fwd_state = layers.rnn(cell=layers.GRUCell(hidden_size=HIDDEN),
                                       inputs=src_embedding,
                                       sequence_length=src_sequence_length)
    bwd_output, bwd_state = layers.rnn(cell=layers.GRUCell(hidden_size=HIDDEN),
                                       inputs=src_embedding,
                                       sequence_length=src_sequence_length, is_reverse=True)
    encoder_output = layers.concat(input=[fwd_output, bwd_output], axis=2)
    encoder_state = layers.concat(input=[fwd_state, bwd_state], axis=1)
    return encoder_output, encoder_state


class DecoderCell(layers.RNNCell):
    def __init__(self, hidden_size):
        self.hidden_size = hidden_size
        self.gru_cell = layers.GRUCell(hidden_size)

    def attention(self, hidden, encoder_output, encoder_output_proj, encoder_padding_mask):
        decoder_state_proj = layers.unsqueeze(
            layers.fc(hidden, size=self.hidden_size, bias_attr=False), [1])
        mixed_state = layers.elementwise_add(
            encoder_output_proj, layers.expand(decoder_state_proj, [1, SRC_LEN, 1]))
        attn_scores = layers.squeeze(layers.fc(input=layers.tanh(mixed_state), size=1,
                                               num_flatten_dims=2, bias_attr=False), [2])
        if encoder_padding_mask is not None:
            attn_scores = layers.elementwise_add(attn_scores, encoder_padding_mask)
        attn_scores = layers.softmax(attn_scores)
        return layers.reduce_sum(layers.elementwise_mul(encoder_output, attn_scores, axis=0),
                                 dim=1)

    def call(self, step_input, hidden, encoder_output, encoder_output_proj,
             encoder_padding_mask=None):
        context = self.attention(hidden, encoder_output, encoder_output_proj,
                                 encoder_padding_mask)
        step_input = layers.concat([step_input, context], axis=1)
        output, new_hidden = self.gru_cell(step_input, hidden)
        return output, new_hidden


def decoder(encoder_output, encoder_output_proj, encoder_state, encoder_padding_mask,
            trg=None, is_train=True):
    decoder_cell = DecoderCell(hidden_size=DECODER)
    decoder_initial_states = layers.fc(encoder_state, size=DECODER, act="tanh")

    def trg_embeder(x):
        return fluid.embedding(input=x, size=[TRG_WORDS, HIDDEN], dtype="float32",
                               param_attr=fluid.ParamAttr(name="trg_emb_table"))

    def output_layer(x):
        return layers.fc(x, size=TRG_WORDS, num_flatten_dims=len(x.shape) - 1,
                         param_attr=fluid.ParamAttr(name="output_w"))

    if is_train:
        decoder_output, _ = layers.rnn(cell=decoder_cell, inputs=trg_embeder(trg),
                                       initial_states=decoder_initial_states,
                                       encoder_output=encoder_output,
                                       encoder_output_proj=encoder_output_proj,
                                       encoder_padding_mask=encoder_padding_mask)
        return output_layer(decoder_output)
    tile = layers.BeamSearchDecoder.tile_beam_merge_with_batch
    beam_search_decoder = layers.BeamSearchDecoder(
        cell=decoder_cell, start_token=BOS, end_token=EOS, beam_size=BEAM,
        embedding_fn=trg_embeder, output_fn=output_layer)
    ids, _ = layers.dynamic_decode(
        decoder=beam_search_decoder, inits=decoder_initial_states, max_step_num=TRG_LEN,
        output_time_major=False, encoder_output=tile(encoder_output, BEAM),
        encoder_output_proj=tile(encoder_output_proj, BEAM),
        encoder_padding_mask=tile(encoder_padding_mask, BEAM))
    return ids


def model_func(is_train=True):
    src = fluid.data(name="src", shape=[None, SRC_LEN], dtype="int64")
    src_sequence_length = fluid.data(name="src_sequence_length", shape=[None], dtype="int64")
    src_embedding = fluid.embedding(input=src, size=[SRC_WORDS, HIDDEN], dtype="float32",
                                    param_attr=fluid.ParamAttr(name="src_emb_table"))
    encoder_output, encoder_state = encoder(src_embedding, src_sequence_length)
    encoder_output_proj = layers.fc(input=encoder_output, size=DECODER, num_flatten_dims=2,
                                    bias_attr=False)
    src_mask = layers.sequence_mask(src_sequence_length, maxlen=SRC_LEN, dtype="float32")
    encoder_padding_mask = layers.scale(src_mask, scale=1e9, bias=-1e9)  # 0 or -1e9
    if not is_train:
        return decoder(encoder_output, encoder_output_proj, encoder_state,
                       encoder_padding_mask, is_train=False)
    trg = fluid.data(name="trg", shape=[None, TRG_LEN], dtype="int64")
    logits = decoder(encoder_output, encoder_output_proj, encoder_state, encoder_padding_mask,
                     trg=trg)
    label = fluid.data(name="label", shape=[None, TRG_LEN], dtype="int64")
    trg_sequence_length = fluid.data(name="trg_sequence_length", shape=[None], dtype="int64")
    loss = layers.softmax_with_cross_entropy(logits=logits,
                                             label=layers.unsqueeze(label, [2]))
    trg_mask = layers.sequence_mask(trg_sequence_length, maxlen=TRG_LEN, dtype="float32")
    loss = layers.elementwise_mul(layers.squeeze(loss, [2]), trg_mask)
    # a sentence's loss summed over its words, averaged over the batch (as the book)
    return layers.reduce_sum(layers.reduce_mean(loss, dim=[0]))


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        avg_cost = model_func(is_train=True)
        fluid.optimizer.Adam(
            learning_rate=0.003,
            grad_clip=fluid.clip.GradientClipByGlobalNorm(clip_norm=5.0)).minimize(avg_cost)
    # The translation program: built as the book's infer program, its parameters named as the
    # training program's (same layers in the same order), run in the training scope.
    test = fluid.Program()
    with fluid.program_guard(test, fluid.Program()), fluid.unique_name.guard():
        ids = model_func(is_train=False)
    return common.Model(main, startup, test,
                        ["src", "src_sequence_length", "trg", "label", "trg_sequence_length"],
                        avg_cost, ["src", "src_sequence_length"], [ids])


def best_sentences(ids):
    """The best beam's words of each row of ids [batch, time, beam], up to <e>."""
    out = []
    for row in np.asarray(ids)[:, :, 0]:
        words = list(row)
        out.append([int(w) for w in words[:words.index(EOS)]] if EOS in words else
                   [int(w) for w in words])
    return out


def evaluate(exe, model):
    right = total = 0
    for feed in batches("test", 100, 0):
        (ids,) = exe.run(model.test, feed={k: feed[k] for k in model.infer_feeds},
                         fetch_list=model.infer_targets)
        for got, want in zip(best_sentences(ids), feed["label"]):
            want = list(want)
            want = [int(w) for w in want[:want.index(EOS)]]
            right += got == want
            total += 1
    return right / total


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
