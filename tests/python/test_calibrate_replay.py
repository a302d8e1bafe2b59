"""bench/sim/calibrate_host.py replayed from a recorded run (no timing here: the measurements come
from the record): the paired run's fastest view and an unpaired replay of the same record with
--across min pool the same runs the same way, through two code paths, and must agree row by row;
a record replayed with other options names the measurement that differs."""
import os
import re
import subprocess
import sys

import pytest

import loom

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "sim", "calibrate_host.py")
RECORD = os.path.join(ROOT, "bench", "sim", "records", "inprocess-2026-11-30.json")
ROW = re.compile(r"^\s+(\d)\s+(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+)%(.*)$")


def replay(*args):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(loom.__file__)))
    out = subprocess.run([sys.executable, SCRIPT, "--transport", "inprocess", "--runs", "5",
                          "--launches", "2", "--replay", RECORD] + list(args),
                         capture_output=True, text=True, timeout=300, env=env)
    return out.returncode, out.stdout + out.stderr


def rows(text):
    """(ranks, algorithm, size) -> the columns after the measured time."""
    out = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            out[(int(m[1]), m[2], int(m[3]))] = [m[5], m[6]] + m[7].split()
    return out


@pytest.mark.skipif(not os.path.exists(RECORD), reason="no recorded run")
def test_fastest_view_equals_an_unpaired_replay_pooling_runs_by_their_fastest():
    code, paired = replay("--paired")
    assert code == 0, paired
    code, unpaired = replay("--across", "min")
    assert code == 0, unpaired
    p, u = rows(paired), rows(unpaired)
    assert len(p) == 80 and set(p) == set(u)
    for key in p:
        # paired: simulated, error, pooled, fastest, range; unpaired: simulated, error, range
        assert p[key][3] == u[key][1] + "%", (key, p[key], u[key])
    fastest = re.search(r"# fastest \(each primitive.*within \+-25%: (\d+) of 80", paired)
    within = re.search(r"# within \+-25%: (\d+) of 80", unpaired)
    assert fastest and within and fastest.group(1) == within.group(1)
    assert "pooled per measurement across its paired runs" in unpaired


@pytest.mark.skipif(not os.path.exists(RECORD), reason="no recorded run")
def test_replay_with_other_options_names_the_measurement():
    code, out = replay("--paired", "--rounds", "3")
    assert code != 0
    assert "this run asks for" in out or "no more measurements" in out, out
