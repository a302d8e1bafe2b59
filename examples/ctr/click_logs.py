"""Synthetic click logs for the CTR example: what a recommender's training data looks like.

Each impression has FIELDS categorical features (user, item, ad, context, ...), one id each.
Ids follow a Zipf law inside each field (a few items are very popular, most are rare) and are
spread over a 10^9 id space by a per-field hash, as a feature-hashing pipeline would give them.
Whether the impression is clicked comes from a hidden logistic model: a bias, one weight per
id, and an interaction between the first two fields, all derived from the ids by a hash, so
that a model has something real to learn and the generator needs no memory per id.

    from click_logs import ClickLogs
    logs = ClickLogs(seed=1)
    ids, labels = logs.batch(64)          # int64 [64, FIELDS], float32 [64, 1]

The same seed gives the same impressions, in the same order, on every machine.
"""
import numpy as np

ID_SPACE = 10**9
FIELDS = 4
_MASK = (1 << 64) - 1


def _mix(x):
    """splitmix64 over a uint64 numpy array: a well-spread hash of each value."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(_MASK)
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(_MASK)
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(_MASK)
    return x ^ (x >> np.uint64(31))


def _unit(h):
    """A uint64 hash as a float in (-1, 1)."""
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 2.0 - 1.0


class ClickLogs:
    """An endless, reproducible stream of impressions.

    seed: the stream (two seeds give different impressions from the same hidden model).
    fields: categorical features per impression.
    zipf: the exponent of the popularity law (larger: more skewed).
    id_space: ids lie in [0, id_space).
    """

    def __init__(self, seed=1, fields=FIELDS, zipf=1.2, id_space=ID_SPACE):
        if fields < 2:
            raise ValueError("ClickLogs: fields must be at least 2, got %d" % fields)
        if zipf <= 1.0:
            raise ValueError("ClickLogs: zipf must be above 1, got %r" % zipf)
        self.fields, self.zipf, self.id_space = fields, zipf, id_space
        self._rs = np.random.RandomState(seed)

    def ids_of(self, ranks):
        """Ids of popularity ranks [N, fields] (rank 1 = most popular of its field)."""
        field = np.arange(self.fields, dtype=np.uint64)[None, :]
        h = _mix(ranks.astype(np.uint64) * np.uint64(self.fields) + field)
        return (h % np.uint64(self.id_space)).astype(np.int64)

    def click_probability(self, ids):
        """The hidden model's click probability of each impression, [N]."""
        u = ids.astype(np.uint64)
        w = _unit(_mix(u ^ np.uint64(0x5DEECE66D)))  # one weight per id
        cross = _unit(_mix(u[:, 0] * np.uint64(1000003) + u[:, 1]))
        logit = -1.0 + 1.5 * w.sum(axis=1) + 1.0 * cross
        return 1.0 / (1.0 + np.exp(-logit))

    def batch(self, n):
        """n impressions: ids int64 [n, fields], clicks float32 [n, 1] (0 or 1)."""
        ranks = self._rs.zipf(self.zipf, size=(n, self.fields))
        ids = self.ids_of(ranks)
        clicked = self._rs.random_sample(n) < self.click_probability(ids)
        return ids, clicked.astype(np.float32).reshape(n, 1)


def auc(labels, scores):
    """Area under the ROC curve of scores for 0/1 labels (ties share their rank)."""
    labels = np.asarray(labels).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    pos = labels > 0.5
    npos, nneg = int(pos.sum()), int((~pos).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    s = scores[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[pos].sum() - npos * (npos + 1) / 2.0) / (npos * nneg))
