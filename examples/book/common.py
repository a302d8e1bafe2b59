"""What every chapter of examples/book does the same way: train, evaluate against the
chapter's target, save and reload an inference model (its outputs must not change), and check
that two CPU places under CompiledProgram.with_data_parallel give the single-place loss.

A chapter module defines:
    NAME, TARGET = (metric name, value, "min" | "max")
    build(seed) -> Model          the programs (Fluid 1.x code, with `import loom as fluid`)
    batches(split, batch_size, seed) -> iterator of feed dicts ("train" or "test")
    evaluate(exe, model) -> the metric on the test split (the chapter's definition)
and calls common.main(sys.modules[__name__]) when run as a script.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "build", "python"))
import loom as fluid  # noqa: E402


class Model:
    """main / startup / test programs, the feed names, the loss, and the inference model's
    feeds and targets."""

    def __init__(self, main, startup, test, feeds, loss, infer_feeds, infer_targets,
                 has_batch_norm=False, extra=None):
        self.main, self.startup, self.test = main, startup, test
        self.feeds, self.loss = feeds, loss
        self.infer_feeds, self.infer_targets = infer_feeds, infer_targets
        self.has_batch_norm = has_batch_norm
        self.extra = extra or {}


def train(chapter, steps=None, epochs=1, batch_size=None, seed=1, log=print):
    """Trains a fresh model; returns (exe, model, scope, losses)."""
    model = chapter.build(seed)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    losses = []
    with fluid.scope_guard(scope):
        exe.run(model.startup)
        step, t0 = 0, time.time()
        for epoch in range(epochs):
            for feed in chapter.batches("train", batch_size or chapter.BATCH, seed + epoch):
                if hasattr(chapter, "train_step"):  # a chapter with several programs (gan)
                    losses.append(float(chapter.train_step(exe, model, feed)))
                else:
                    (loss,) = exe.run(model.main, feed=feed, fetch_list=[model.loss])
                    losses.append(float(np.mean(loss)))
                step += 1
                if log and step % 100 == 0:
                    log("%s: epoch %d step %d loss %.4f (%.1f steps/s)"
                        % (chapter.NAME, epoch, step, np.mean(losses[-100:]),
                           step / (time.time() - t0)))
                if steps and step >= steps:
                    return exe, model, scope, losses
    return exe, model, scope, losses


def check_inference_model(chapter, exe, model, scope):
    """Saves the inference model, loads it into a new scope and checks its outputs on a test
    batch equal the test program's. Returns the largest difference."""
    feed = next(iter(chapter.batches("test", chapter.BATCH, 0)))
    infer_feed = {k: feed[k] for k in model.infer_feeds}
    test_block = model.test.global_block()
    with fluid.scope_guard(scope):
        want = exe.run(model.test, feed={k: v for k, v in feed.items() if test_block.has_var(k)},
                       fetch_list=model.infer_targets)
        with tempfile.TemporaryDirectory() as d:
            fluid.io.save_inference_model(d, model.infer_feeds, model.infer_targets, exe,
                                          main_program=model.test)
            with fluid.scope_guard(fluid.Scope()):
                prog, feeds, fetches = fluid.io.load_inference_model(d, exe)
                got = exe.run(prog, feed={k: infer_feed[k] for k in feeds},
                              fetch_list=fetches)
    return max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in zip(got, want))


def check_data_parallel(chapter, steps=2, seed=3):
    """The losses of `steps` steps on 2 CPU places (one global batch, split) against one place,
    from the same initial parameters; returns the largest relative difference. A model with
    batch_norm normalizes each place's half batch by its own statistics (as Paddle's
    ParallelExecutor does): its reference is the first step only, the mean of the two halves'
    losses from a forward-only copy of the program."""
    feeds = []
    names = chapter.build(seed).feeds
    for feed in chapter.batches("train", chapter.BATCH, seed):
        feeds.append({k: feed[k] for k in names})
        if len(feeds) == (1 if chapter.build(seed).has_batch_norm else steps):
            break
    results = []
    for places in (1, 2):
        model = chapter.build(seed)
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(model.startup)
            prog = model.main
            if places == 2:
                prog = fluid.CompiledProgram(model.main).with_data_parallel(
                    loss_name=model.loss.name, places=fluid.cpu_places(2))
            elif model.has_batch_norm:
                forward = fluid.io._prune_to_targets(model.main.clone(), [model.loss.name])
                feed = feeds[0]
                halves = [{k: v[:len(v) // 2] for k, v in feed.items()},
                          {k: v[len(v) // 2:] for k, v in feed.items()}]
                results.append([float(np.mean([np.mean(exe.run(forward, feed=h,
                                                                  fetch_list=[model.loss])[0])
                                               for h in halves]))])
                continue
            out = []
            for feed in feeds:
                (loss,) = exe.run(prog, feed=feed, fetch_list=[model.loss])
                out.append(float(np.mean(loss)))
            results.append(out)
    one, two = np.array(results[0]), np.array(results[1])
    return float(np.max(np.abs(one - two) / np.maximum(np.abs(one), 1e-12)))


def main(chapter):
    ap = argparse.ArgumentParser(description=chapter.__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=chapter.EPOCHS)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps")
    ap.add_argument("--batch-size", type=int, default=chapter.BATCH)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t0 = time.time()
    exe, model, scope, losses = train(chapter, args.steps or None, args.epochs, args.batch_size,
                                      args.seed)
    with fluid.scope_guard(scope):
        value = chapter.evaluate(exe, model)
    name, target, direction = chapter.TARGET
    met = value <= target if direction == "min" else value >= target
    print("%s: %d steps in %.1f s, final loss %.4f, test %s %.4f (target %s %s): %s"
          % (chapter.NAME, len(losses), time.time() - t0, np.mean(losses[-20:]), name, value,
             "<=" if direction == "min" else ">=", target, "met" if met else "NOT met"))
    diff = check_inference_model(chapter, exe, model, scope)
    print("%s: inference model saved and reloaded, outputs differ by %.3g" % (chapter.NAME, diff))
    rel = check_data_parallel(chapter)
    print("%s: 2 CPU places vs 1, loss relative difference %.3g" % (chapter.NAME, rel))
    return 0 if met and diff < 1e-5 and rel < 1e-4 else 1
