"""The book chapters of examples/book, a few steps each: they train (finite losses), their
inference model saved and reloaded gives the test program's outputs, and two CPU places give
the single-place loss within rounding. `examples/book/run_all.sh` trains them to their
targets."""
import importlib
import math
import os
import sys

import pytest

BOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "book")
sys.path.insert(0, BOOK)

CHAPTERS = ["fit_a_line", "recognize_digits", "image_classification", "word2vec", "gan",
            "understand_sentiment", "understand_sentiment_lstm", "recommender_system",
            "label_semantic_roles", "machine_translation"]
NEEDS_FASHION_MNIST = {"recognize_digits", "gan"}


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_trains_saves_and_runs_data_parallel(name):
    chapter = importlib.import_module(name)
    if name in NEEDS_FASHION_MNIST:
        import recognize_digits
        if not os.path.exists(os.path.join(recognize_digits.DATA_DIR,
                                           "train-images-idx3-ubyte.gz")):
            pytest.skip("Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)")
    import common
    exe, model, scope, losses = common.train(chapter, steps=6, log=None)
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses), losses
    assert common.check_inference_model(chapter, exe, model, scope) < 1e-5
    assert common.check_data_parallel(chapter) < 1e-4
