#!/usr/bin/python3
"""gan: the book's DCGAN (generator: fc + batch_norm, then two conv2d_transpose layers up to
28x28; discriminator: conv + pool blocks and fc layers; sigmoid_cross_entropy_with_logits
against labels from fill_constant_batch_size_like; Adam with beta1 0.5; the discriminator and
the generator in programs of their own, sharing parameters by name), on Fashion-MNIST images.
Target: the mean of 1000 generated images correlates with the mean test image (the
generator learned where the clothes are) at 0.8 or more.

    PYTHONPATH=build/python /usr/bin/python3 examples/book/gan.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import recognize_digits  # noqa: E402  (the Fashion-MNIST reader)
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "gan", 64, 1
TARGET = ("mean-image correlation", 0.8, "max")
NOISE = 100
STEPS_PER_EPOCH = 800


def batches(split, batch_size, seed):
    x, _ = recognize_digits._split("train" if split == "train" else "test")
    rng = np.random.RandomState(seed)
    for step in range(STEPS_PER_EPOCH if split == "train" else 4):
        rows = rng.randint(0, len(x), batch_size)
        yield {"img": x[rows], "label": np.ones((batch_size, 1), "float32"),
               "noise": rng.uniform(-1, 1, (batch_size, NOISE)).astype("float32")}


def bn(x, name, act=None):
    return fluid.layers.batch_norm(x, act=act, param_attr=name + "_bn_w",
                                   bias_attr=name + "_bn_b", moving_mean_name=name + "_bn_m",
                                   moving_variance_name=name + "_bn_v")


def D(x):
    hid = fluid.nets.simple_img_conv_pool(x, num_filters=32, filter_size=5, pool_size=2,
                                          pool_stride=2, act="relu",
                                          param_attr="D_c1_w", bias_attr="D_c1_b")
    hid = bn(fluid.nets.simple_img_conv_pool(hid, num_filters=64, filter_size=5, pool_size=2,
                                             pool_stride=2, param_attr="D_c2_w",
                                             bias_attr="D_c2_b"), "D_c2", act="relu")
    hid = fluid.layers.fc(hid, 1024, param_attr="D_f1_w", bias_attr="D_f1_b")
    hid = bn(hid, "D_f1", act="relu")
    return fluid.layers.fc(hid, 1, param_attr="D_f2_w", bias_attr="D_f2_b")


def G(z):
    hid = bn(fluid.layers.fc(z, 1024, param_attr="G_f1_w", bias_attr="G_f1_b"), "G_f1", "relu")
    hid = bn(fluid.layers.fc(hid, 128 * 7 * 7, param_attr="G_f2_w", bias_attr="G_f2_b"),
             "G_f2", "relu")
    hid = fluid.layers.reshape(hid, [-1, 128, 7, 7])
    hid = bn(fluid.layers.conv2d_transpose(hid, 64, output_size=[14, 14], filter_size=4,
                                           stride=2, padding=1, param_attr="G_t1_w",
                                           bias_attr="G_t1_b"), "G_t1", "relu")
    return fluid.layers.conv2d_transpose(hid, 1, output_size=[28, 28], filter_size=4, stride=2,
                                         padding=1, act="tanh", param_attr="G_t2_w",
                                         bias_attr="G_t2_b")


def build(seed):
    d_program, dg_program, startup = fluid.Program(), fluid.Program(), fluid.Program()
    for p in (d_program, dg_program, startup):
        p.random_seed = seed
    with fluid.unique_name.guard():
        with fluid.program_guard(d_program, startup):
            img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
            label = fluid.data(name="label", shape=[None, 1], dtype="float32")
            d_logit = D(img)
            d_loss = fluid.layers.mean(fluid.layers.sigmoid_cross_entropy_with_logits(
                x=d_logit, label=label))
        with fluid.program_guard(dg_program, startup):
            noise = fluid.data(name="noise", shape=[None, NOISE], dtype="float32")
            g_img = G(noise)
            g_train = dg_program.clone()  # generates with batch statistics, for training
            g_program = dg_program.clone(for_test=True)  # moving statistics: inference
            dg_logit = D(g_img)
            ones = fluid.layers.fill_constant_batch_size_like(input=noise, shape=[-1, 1],
                                                              dtype="float32", value=1.0)
            dg_loss = fluid.layers.mean(fluid.layers.sigmoid_cross_entropy_with_logits(
                x=dg_logit, label=ones))
        d_params = [p.name for p in d_program.global_block().all_parameters()
                    if p.name.startswith("D_")]
        g_params = [p.name for p in dg_program.global_block().all_parameters()
                    if p.name.startswith("G_")]
        with fluid.program_guard(d_program, startup):
            fluid.optimizer.Adam(learning_rate=2e-4, beta1=0.5).minimize(
                d_loss, parameter_list=d_params)
        with fluid.program_guard(dg_program, startup):
            fluid.optimizer.Adam(learning_rate=2e-4, beta1=0.5).minimize(
                dg_loss, parameter_list=g_params)
    return common.Model(d_program, startup, g_program, ["img", "label"], d_loss, ["noise"],
                        [g_img], has_batch_norm=True,
                        extra={"dg_program": dg_program, "dg_loss": dg_loss, "g_train": g_train})


def train_step(exe, model, feed):
    """One discriminator step on real (label 1) and generated (label 0) images, then two
    generator steps; returns the discriminator's loss."""
    n = len(feed["img"])
    (fake,) = exe.run(model.extra["g_train"], feed={"noise": feed["noise"]},
                      fetch_list=model.infer_targets)
    (real_loss,) = exe.run(model.main, feed={"img": feed["img"], "label": feed["label"]},
                           fetch_list=[model.loss])
    (fake_loss,) = exe.run(model.main, feed={"img": fake, "label": np.zeros((n, 1), "float32")},
                           fetch_list=[model.loss])
    rng = np.random.RandomState(int(abs(feed["noise"][0, 0]) * 1e6))
    for _ in range(2):
        z = rng.uniform(-1, 1, (n, NOISE)).astype("float32")
        exe.run(model.extra["dg_program"], feed={"noise": z},
                fetch_list=[model.extra["dg_loss"]])
    return (float(np.mean(real_loss)) + float(np.mean(fake_loss))) / 2


def evaluate(exe, model):
    z = np.random.RandomState(9).uniform(-1, 1, (1000, NOISE)).astype("float32")
    (fake,) = exe.run(model.test, feed={"noise": z}, fetch_list=model.infer_targets)
    real, _ = recognize_digits._split("test")
    a, b = fake.mean(0).ravel(), real.mean(0).ravel()
    return float(np.corrcoef(a, b)[0, 1])


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
