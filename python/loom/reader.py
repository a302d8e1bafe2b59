"""Reader decorators (Fluid's ``paddle.batch`` / ``paddle.reader.shuffle``). A reader is a
function returning an iterator over samples."""
import random


def batch(reader, batch_size, drop_last=False):
    """Groups samples into lists of batch_size."""
    if int(batch_size) <= 0:
        raise ValueError("batch_size must be positive, got %r" % (batch_size,))

    def batched():
        buf = []
        for sample in reader():
            buf.append(sample)
            if len(buf) == batch_size:
                yield buf
                buf = []
        if buf and not drop_last:
            yield buf
    return batched


def shuffle(reader, buf_size, seed=None):
    """Shuffles samples within windows of buf_size."""
    def shuffled():
        rng = random.Random(seed)
        buf = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                rng.shuffle(buf)
                yield from buf
                buf = []
        rng.shuffle(buf)
        yield from buf
    return shuffled


def firstn(reader, n):
    def first():
        for i, sample in enumerate(reader()):
            if i >= n:
                return
            yield sample
    return first
