"""Reader decorators (Fluid's ``paddle.batch`` / ``paddle.reader.shuffle``). A reader is a
function returning an iterator over samples."""
import multiprocessing as mp
import queue
import random
import threading
from concurrent.futures import ThreadPoolExecutor


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


def map_readers(func, *readers):
    """Samples func(a, b, ...) of the readers' samples taken together."""
    def mapped():
        for samples in zip(*[r() for r in readers]):
            yield func(*samples)
    return mapped


def chain(*readers):
    """The samples of each reader in turn."""
    def chained():
        for r in readers:
            yield from r()
    return chained


def compose(*readers, check_alignment=True):
    """Samples joined field by field: (a, b) from readers of a and of b (tuples are flattened).
    With check_alignment, readers of different lengths are an error."""
    def flat(x):
        return x if isinstance(x, tuple) else (x,)

    def composed():
        its = [r() for r in readers]
        while True:
            parts, ended = [], 0
            for it in its:
                try:
                    parts.append(next(it))
                except StopIteration:
                    ended += 1
            if ended:
                if check_alignment and ended != len(its):
                    raise ValueError("compose: the readers have different lengths")
                return
            yield sum((flat(p) for p in parts), ())
    return composed


def buffered(reader, size):
    """The same samples, read ahead by a thread into a buffer of size."""
    end = object()

    def read_ahead():
        q = queue.Queue(maxsize=max(1, int(size)))
        failure = []

        def fill():
            try:
                for s in reader():
                    q.put(s)
            except Exception as e:  # noqa: BLE001 - raised in the consumer
                failure.append(e)
            q.put(end)
        t = threading.Thread(target=fill, daemon=True)
        t.start()
        while True:
            s = q.get()
            if s is end:
                break
            yield s
        t.join()
        if failure:
            raise failure[0]
    return read_ahead


def xmap_readers(mapper, reader, process_num, buffer_size, order=False):
    """mapper applied to every sample by process_num threads (in the reader's order with
    order=True, else as they finish)."""

    def xmapped():
        with ThreadPoolExecutor(max_workers=max(1, int(process_num))) as pool:
            if order:
                yield from pool.map(mapper, reader())
                return
            pending = []
            for s in reader():
                pending.append(pool.submit(mapper, s))
                if len(pending) >= max(1, int(buffer_size)):
                    yield pending.pop(0).result()
            for f in pending:
                yield f.result()
    return xmapped


def cache(reader):
    """Reads reader once, then replays its samples."""
    samples = []
    done = []

    def cached():
        if not done:
            samples.extend(reader())
            done.append(True)
        yield from samples
    return cached


def _reader_process(index, reader, out):
    """Runs in a child process: every sample of reader, then ("end", index) or ("error", ...)."""
    try:
        for sample in reader():
            out.put(("sample", sample))
        out.put(("end", index))
    except BaseException as e:  # the parent re-raises it, naming the reader
        out.put(("error", index, "%s: %s" % (type(e).__name__, e)))


def multiprocess_reader(readers, use_pipe=True, queue_size=1000):
    """Reads every reader of the list in its own process (fork) and yields their samples as
    they come, interleaved: samples of one reader keep their order, readers do not. The
    samples travel pickled through a multiprocessing queue of queue_size (use_pipe is
    accepted: both of Fluid's transports give the same samples). A reader that raises, or a
    process that dies, ends the iteration with an error naming the reader's index."""
    if not isinstance(readers, (list, tuple)) or not readers:
        raise ValueError("multiprocess_reader: readers must be a non-empty list of readers, "
                         "got %r" % (readers,))
    for i, r in enumerate(readers):
        if not callable(r):
            raise TypeError("multiprocess_reader: readers[%d] is not callable (%r)" % (i, r))
    if int(queue_size) <= 0:
        raise ValueError("multiprocess_reader: queue_size must be positive, got %r"
                         % (queue_size,))

    def read():
        ctx = mp.get_context("fork")
        out = ctx.Queue(int(queue_size))
        procs = [ctx.Process(target=_reader_process, args=(i, r, out), daemon=True)
                 for i, r in enumerate(readers)]
        for p in procs:
            p.start()
        running = set(range(len(procs)))
        try:
            while running:
                try:
                    msg = out.get(timeout=0.5)
                except queue.Empty:
                    for i in sorted(running):
                        # A process that exited without its end message died (killed, or
                        # os._exit); a last message may still be in flight: look once more.
                        if not procs[i].is_alive():
                            try:
                                msg = out.get(timeout=1.0)
                            except queue.Empty:
                                raise RuntimeError(
                                    "multiprocess_reader: the process of readers[%d] exited "
                                    "with code %s before its reader ended"
                                    % (i, procs[i].exitcode)) from None
                            break
                    else:
                        continue
                if msg[0] == "sample":
                    yield msg[1]
                elif msg[0] == "end":
                    running.discard(msg[1])
                else:
                    raise RuntimeError("multiprocess_reader: readers[%d] raised %s"
                                       % (msg[1], msg[2]))
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join(timeout=5)
            out.close()
    return read
