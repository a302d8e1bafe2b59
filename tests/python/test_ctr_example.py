"""examples/ctr: the click-log generator is reproducible and skewed as documented, its AUC is
right, and the wide & deep example learns (held-out AUC well above chance) in one process,
over 2 CPU places, and as 2 trainers x 2 servers under loom launch."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CTR = os.path.abspath(os.path.join(HERE, "..", "..", "examples", "ctr"))
sys.path.insert(0, CTR)
from click_logs import ID_SPACE, ClickLogs, auc  # noqa: E402


def test_click_logs_are_reproducible_and_zipf_skewed():
    a_ids, a_y = ClickLogs(seed=3).batch(5000)
    b_ids, b_y = ClickLogs(seed=3).batch(5000)
    np.testing.assert_array_equal(a_ids, b_ids)
    np.testing.assert_array_equal(a_y, b_y)
    assert not np.array_equal(ClickLogs(seed=4).batch(5000)[0], a_ids)
    assert a_ids.min() >= 0 and a_ids.max() < ID_SPACE and a_ids.dtype == np.int64
    # Zipf: the most popular id of a field covers a large share, yet most ids are rare.
    col = a_ids[:, 0]
    _, counts = np.unique(col, return_counts=True)
    assert counts.max() > 0.1 * len(col)  # rank 1: 1 / zeta(1.2) = 18%
    assert (counts == 1).sum() > 0.5 * len(counts)
    # Fields use different ids for the same popularity rank.
    assert len(set(ClickLogs().ids_of(np.ones((1, 4), dtype=np.int64))[0])) == 4
    assert 0.05 < a_y.mean() < 0.6
    with pytest.raises(ValueError, match="zipf"):
        ClickLogs(zipf=1.0)


def test_auc_matches_pair_counting():
    rs = np.random.RandomState(0)
    for _ in range(20):
        y = rs.randint(0, 2, 40)
        s = rs.randint(0, 6, 40).astype(float)  # many ties
        pos, neg = s[y == 1], s[y == 0]
        want = np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg])
        assert abs(auc(y, s) - want) < 1e-12
    assert np.isnan(auc([1, 1], [0.2, 0.3]))


def run(args, timeout=240):
    import loom as fluid
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def held_out(out):
    got = [float(x) for x in re.findall(r"held-out auc ([0-9.]+)", out)]
    assert got, out
    return got


def test_distributed_needs_servers():
    with pytest.raises(AssertionError, match="parameter servers"):
        run([sys.executable, os.path.join(CTR, "train.py"), "--distributed"])


@pytest.mark.parametrize("places", [1, 2])
def test_example_learns(places):
    out = run([sys.executable, os.path.join(CTR, "train.py"), "--steps", "150",
               "--log-every", "50", "--vocab", "100000", "--places", str(places)])
    assert len(re.findall(r"step \d+/150  loss [0-9.]+  auc [0-9.]+  \d+ samples/s", out)) == 3
    assert held_out(out)[0] > 0.7, out


@pytest.mark.parametrize("table", [["--vocab", "50000"], ["--distributed"]])
def test_example_under_loom_launch_with_two_servers(table):
    """A sliced table, and a 10^9-row distributed one that lives on the servers."""
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    out = run([loom, "launch", "--workers", "2", "--servers", "2", "--timeout", "180", "--",
               sys.executable, os.path.join(CTR, "train.py"), "--steps", "60",
               "--log-every", "30"] + table)
    aucs = held_out(out)
    assert len(aucs) == 2 and aucs[0] == aucs[1], out  # both trainers hold the servers' model
    assert aucs[0] > 0.65, out
