"""Fluid's fluid.metrics: accumulators over the numpy outputs of executor runs (they run no
ops): update(...) after each batch, eval() for the value so far, reset() to start over."""
import numpy as np


class MetricBase:
    def __init__(self, name=None):
        self._name = name or self.__class__.__name__

    def reset(self):
        """Zeroes every state attribute (those not starting with an underscore)."""
        for k, v in list(vars(self).items()):
            if k.startswith("_"):
                continue
            if isinstance(v, np.ndarray):
                setattr(self, k, np.zeros_like(v))
            elif isinstance(v, (int, float)):
                setattr(self, k, type(v)(0))

    def get_config(self):
        return {"name": self._name}

    def update(self, *args, **kwargs):
        raise NotImplementedError("%s.update" % self.__class__.__name__)

    def eval(self):
        raise NotImplementedError("%s.eval" % self.__class__.__name__)


class CompositeMetric(MetricBase):
    """Several metrics updated with the same predictions and labels."""

    def __init__(self, name=None):
        super().__init__(name)
        self._metrics = []

    def add_metric(self, metric):
        if not isinstance(metric, MetricBase):
            raise TypeError("add_metric takes a MetricBase, got %r" % (metric,))
        self._metrics.append(metric)

    def reset(self):
        for m in self._metrics:
            m.reset()

    def update(self, preds, labels):
        for m in self._metrics:
            m.update(preds, labels)

    def eval(self):
        return [m.eval() for m in self._metrics]


class Precision(MetricBase):
    """Binary precision: preds are probabilities of class 1 (rounded at 0.5), labels 0/1."""

    def __init__(self, name=None):
        super().__init__(name)
        self.tp = 0
        self.fp = 0

    def update(self, preds, labels):
        p = np.rint(np.asarray(preds)).astype("int64").ravel()
        l = np.asarray(labels).astype("int64").ravel()
        self.tp += int(((p == 1) & (l == 1)).sum())
        self.fp += int(((p == 1) & (l == 0)).sum())

    def eval(self):
        ap = self.tp + self.fp
        return float(self.tp) / ap if ap else 0.0


class Recall(MetricBase):
    """Binary recall: preds are probabilities of class 1 (rounded at 0.5), labels 0/1."""

    def __init__(self, name=None):
        super().__init__(name)
        self.tp = 0
        self.fn = 0

    def update(self, preds, labels):
        p = np.rint(np.asarray(preds)).astype("int64").ravel()
        l = np.asarray(labels).astype("int64").ravel()
        self.tp += int(((p == 1) & (l == 1)).sum())
        self.fn += int(((p == 0) & (l == 1)).sum())

    def eval(self):
        recall = self.tp + self.fn
        return float(self.tp) / recall if recall else 0.0


class Accuracy(MetricBase):
    """The sample-weighted mean of per-batch accuracies (value, weight = batch size)."""

    def __init__(self, name=None):
        super().__init__(name)
        self.value = 0.0
        self.weight = 0.0

    def update(self, value, weight):
        w = float(np.asarray(weight).sum()) if np.ndim(weight) else float(weight)
        if w < 0:
            raise ValueError("Accuracy.update: weight %r is negative" % (weight,))
        self.value += float(np.asarray(value).ravel()[0]) * w
        self.weight += w

    def eval(self):
        if self.weight == 0:
            raise ValueError("Accuracy.eval: no batch was given (update first)")
        return self.value / self.weight


class ChunkEvaluator(MetricBase):
    """Precision, recall and F1 of chunks (named entities, phrases) from the three counts the
    chunk_eval layer returns per batch: update(num_infer_chunks, num_label_chunks,
    num_correct_chunks), then eval() -> (precision, recall, f1) over every batch so far."""

    def __init__(self, name=None):
        super().__init__(name)
        self.num_infer_chunks = 0
        self.num_label_chunks = 0
        self.num_correct_chunks = 0

    @staticmethod
    def _count(value, what):
        a = np.asarray(value)
        if a.size != 1:
            raise ValueError("ChunkEvaluator.update: %s must be one count, got shape %s"
                             % (what, list(a.shape)))
        n = int(a.ravel()[0])
        if n < 0:
            raise ValueError("ChunkEvaluator.update: %s is negative (%d)" % (what, n))
        return n

    def update(self, num_infer_chunks, num_label_chunks, num_correct_chunks):
        infer = self._count(num_infer_chunks, "num_infer_chunks")
        label = self._count(num_label_chunks, "num_label_chunks")
        correct = self._count(num_correct_chunks, "num_correct_chunks")
        if correct > min(infer, label):
            raise ValueError("ChunkEvaluator.update: %d correct chunks of %d inferred and %d "
                             "labeled" % (correct, infer, label))
        self.num_infer_chunks += infer
        self.num_label_chunks += label
        self.num_correct_chunks += correct

    def eval(self):
        precision = (float(self.num_correct_chunks) / self.num_infer_chunks
                     if self.num_infer_chunks else 0.0)
        recall = (float(self.num_correct_chunks) / self.num_label_chunks
                  if self.num_label_chunks else 0.0)
        f1 = (2 * precision * recall / (precision + recall)
              if self.num_correct_chunks else 0.0)
        return precision, recall, f1


class EditDistance(MetricBase):
    """Mean edit distance and instance error rate from (distances, sequence count) per batch."""

    def __init__(self, name=None):
        super().__init__(name)
        self.total_distance = 0.0
        self.seq_num = 0
        self.instance_error = 0

    def update(self, distances, seq_num):
        d = np.asarray(distances, dtype="float64").ravel()
        n = int(np.asarray(seq_num).ravel()[0]) if np.ndim(seq_num) else int(seq_num)
        self.seq_num += n
        self.instance_error += int((d > 0).sum())
        self.total_distance += float(d.sum())

    def eval(self):
        if self.seq_num == 0:
            raise ValueError("EditDistance.eval: no sequence was given (update first)")
        return self.total_distance / self.seq_num, self.instance_error / float(self.seq_num)


class Auc(MetricBase):
    """ROC AUC of binary predictions ([N, 2] class probabilities, or [N] of class 1) from
    num_thresholds buckets, as Fluid's."""

    def __init__(self, name=None, curve="ROC", num_thresholds=4095):
        super().__init__(name)
        if curve != "ROC":
            raise NotImplementedError("Auc: only curve='ROC'")
        self._num_thresholds = int(num_thresholds)
        self._stat_pos = np.zeros(self._num_thresholds + 1, "int64")
        self._stat_neg = np.zeros(self._num_thresholds + 1, "int64")

    def reset(self):
        self._stat_pos[:] = 0
        self._stat_neg[:] = 0

    def update(self, preds, labels):
        p = np.asarray(preds, dtype="float64")
        p = p[:, 1] if p.ndim == 2 and p.shape[1] == 2 else p.ravel()
        l = np.asarray(labels).astype("int64").ravel()
        if len(p) != len(l):
            raise ValueError("Auc.update: %d predictions for %d labels" % (len(p), len(l)))
        bins = np.clip((p * self._num_thresholds).astype("int64"), 0, self._num_thresholds)
        np.add.at(self._stat_pos, bins[l == 1], 1)
        np.add.at(self._stat_neg, bins[l != 1], 1)

    def eval(self):
        tot_pos = tot_neg = 0.0
        auc = 0.0
        for i in range(self._num_thresholds, -1, -1):
            pos, neg = float(self._stat_pos[i]), float(self._stat_neg[i])
            auc += neg * (tot_pos + tot_pos + pos) / 2.0
            tot_pos += pos
            tot_neg += neg
        return auc / (tot_pos * tot_neg) if tot_pos > 0 and tot_neg > 0 else 0.0
