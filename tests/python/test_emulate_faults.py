"""Network faults on an emulated cluster (`loom launch --emulate`), each injected into a running
parameter-server job (pserver_worker.py, sync, 2 servers and 2 trainers): a NIC going down, a
partition between two nodes, and a node's processes SIGKILLed end the job within its deadline
with errors that name the node and the address cut off; 1% packet loss and 200 ms of jitter
only slow it, and the result equals the undisturbed one exactly. Every job is bounded in time and its namespaces are gone
afterwards. Needs root; skips where namespaces cannot be made."""
import os
import re
import selectors
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from test_emulate import LOOM, PYPATH, emulation, namespaces_of  # noqa: F401 (a fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "pserver_worker.py")
# Peers notice silence within 1.5 s (heartbeats every 100 ms).
FAST = {"LOOM_PS_HEARTBEAT_MS": "100", "LOOM_PS_TIMEOUT_MS": "1500",
        "LOOM_PS_CONNECT_TIMEOUT_MS": "20000"}


class Launch:
    """One `loom launch --emulate` job; its stdout read line by line with deadlines."""

    def __init__(self, spec, steps, extra=()):
        self.proc = subprocess.Popen(
            [LOOM, "launch", "--emulate", spec, "--workers", "2", "--servers", "2",
             "--timeout", "120", "--", sys.executable, WORKER, "--steps", str(steps)] +
            list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=PYPATH, **FAST))
        self.lines = []

    def netns(self, node):
        return "loom-%d-n%d" % (self.proc.pid, node)

    def wait_for(self, pattern, timeout=60):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError("no line matching %r in %.0f s:\n%s" % (pattern, timeout,
                                                                     "".join(self.lines)))

    def finish(self, timeout=60):
        """Waits for the end (stopping the launcher past the deadline); returns (rc, stderr, s)."""
        start = time.monotonic()
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError("the job did not end within %d s" % timeout)
        self.lines.append(out)
        return self.proc.returncode, err, time.monotonic() - start


    def stop(self):
        """Stops a launcher still running (SIGTERM: it removes its cluster), bounded in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, timeout=30)


def test_a_nic_going_down_ends_the_job_naming_the_node_and_address(emulation):
    job = Launch("2:100mbit", 500)
    try:
        job.wait_for(r"^\[worker 0\] step 3 ")
        ip("-n", job.netns(1), "link", "set", "eth0", "down")
        rc, err, took = job.finish()
    finally:
        job.stop()
    assert rc == 1, err
    assert took < 30, "ended %.1f s after the link went down" % took
    # The launcher names the process and its node; the process names the server it lost, by the
    # address of the link that went down.
    assert re.search(r"loom launch: (worker|server) \d on node\d (exited|killed)", err), err
    assert "10.77.0.2:6171" in "".join(job.lines) + err, "".join(job.lines) + err
    assert namespaces_of(job.proc.pid) == []


def test_a_partition_between_two_nodes_ends_the_job_naming_them(emulation):
    # Three nodes: servers on nodes 0 and 1 (of 2 servers over 3 nodes: 0 and 1), trainers on
    # nodes 0 and 1; node 0 and node 1 stop hearing each other, node 2 stays reachable.
    job = Launch("3:100mbit", 500)
    try:
        job.wait_for(r"^\[worker 1\] step 3 ")
        rules = ("table inet partition {\n"
                 " chain in { type filter hook input priority 0; ip saddr 10.77.0.2 drop; }\n"
                 " chain out { type filter hook output priority 0; ip daddr 10.77.0.2 drop; }\n"
                 "}\n")
        subprocess.run(["ip", "netns", "exec", job.netns(0), "nft", "-f", "-"], input=rules,
                       text=True, check=True, timeout=30)
        rc, err, took = job.finish()
    finally:
        job.stop()
    assert rc == 1, err
    assert took < 30, took
    text = "".join(job.lines) + err
    assert re.search(r"10\.77\.0\.[12]:61\d\d", text), text
    assert re.search(r"on node[01] (exited|killed)", err), err
    assert namespaces_of(job.proc.pid) == []


def test_a_nodes_processes_killed_end_the_job_naming_the_node(emulation):
    job = Launch("2:100mbit", 500)
    try:
        job.wait_for(r"^\[worker 1\] step 2 ")
        pids = subprocess.run(["ip", "netns", "pids", job.netns(1)], capture_output=True,
                              text=True, check=True, timeout=30).stdout.split()
        assert len(pids) == 2, pids  # server 1 and worker 1
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        rc, err, took = job.finish()
    finally:
        job.stop()
    assert rc == 1, err
    assert re.search(r"(server|worker) 1 on node1 killed by signal 9 \(SIGKILL\); stopped the "
                     r"others", err), err
    assert namespaces_of(job.proc.pid) == []


@pytest.mark.parametrize("faulty,steps", [
    ("2:100mbit:loss=1", 30),
    # Every frame waits 0-400 ms, drawn anew each time (heartbeats too: peers still hear each
    # other within the 1.5 s timeout).
    ("2:100mbit:delay=200ms:jitter=200ms", 3)])
def test_loss_and_jitter_only_slow_the_job_and_change_nothing(emulation, tmp_path, faulty, steps):
    got = {}
    for spec in ("2:100mbit", faulty):
        out = tmp_path / (spec.replace(":", "_") + ".npz")
        job = Launch(spec, steps, ["--out", str(out)])
        rc, err, _ = job.finish(timeout=150)
        assert rc == 0, "".join(job.lines) + err
        got[spec] = np.load(out)
    clean, slowed = got["2:100mbit"], got[faulty]
    assert sorted(clean.files) == sorted(slowed.files)
    for n in clean.files:  # sync training is deterministic: TCP delivered every byte
        np.testing.assert_array_equal(slowed[n], clean[n], err_msg=n)
