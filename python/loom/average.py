"""fluid.average: a running weighted mean of values fetched from executor runs (it runs no
ops). Fluid 1.x training loops use it to average a loss or an accuracy over an epoch:

    avg = fluid.average.WeightedAverage()
    for batch in reader():
        loss, acc = exe.run(..., fetch_list=[avg_cost, acc])
        avg.add(value=acc, weight=len(batch))
    print(avg.eval())
"""
import numpy as np

__all__ = ["WeightedAverage"]


class WeightedAverage:
    """sum(value_i * weight_i) / sum(weight_i) over the add() calls since the last reset().
    value is a number or a numpy array (the mean is then element-wise); weight a number."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.numerator = None
        self.denominator = None

    def add(self, value, weight):
        v = np.asarray(value, dtype="float64")
        w = np.asarray(weight, dtype="float64")
        if w.size != 1:
            raise ValueError("WeightedAverage.add: weight must be one number, got shape %s"
                             % list(w.shape))
        w = float(w.ravel()[0])
        if not np.isfinite(w) or w < 0:
            raise ValueError("WeightedAverage.add: weight must be finite and >= 0, got %r"
                             % (weight,))
        if self.numerator is not None and np.shape(self.numerator) != v.shape:
            raise ValueError("WeightedAverage.add: value of shape %s after values of shape %s"
                             % (list(v.shape), list(np.shape(self.numerator))))
        if self.numerator is None:
            self.numerator, self.denominator = v * w, w
        else:
            self.numerator = self.numerator + v * w
            self.denominator += w

    def eval(self):
        if self.numerator is None or self.denominator == 0:
            raise ValueError("WeightedAverage.eval: nothing was added (or every weight was 0)")
        out = self.numerator / self.denominator
        return float(out) if out.ndim == 0 else out
