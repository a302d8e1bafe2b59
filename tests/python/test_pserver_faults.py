"""Parameter-server faults, each in real processes (pserver_worker.py): a trainer killed with
SIGKILL (sync: everyone ends with an error naming it; async: the rest carry on), a server killed
(every trainer errors naming it), exe.close() missing, a wrong secret, programs from different
transpiles, a port in use; and checkpoints: training resumed from save_persistables equals
training that never stopped. Every process is bounded in time and killed by pid at the end."""
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import loom as fluid
from pserver_util import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
# Where this process found loom (conftest puts the build on sys.path): the workers import it too.
LOOM_PATH = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))] +
                            [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
WORKER = os.path.join(HERE, "pserver_worker.py")
FAST = {"LOOM_PS_HEARTBEAT_MS": "100", "LOOM_PS_TIMEOUT_MS": "1500",
        "LOOM_PS_CONNECT_TIMEOUT_MS": "20000"}


class Job:
    """Servers and trainers of one job as processes; stop() kills whatever still runs."""

    def __init__(self, servers, trainers, secret="job-secret", env=None):
        self.eps = free_ports(servers)
        self.trainers = trainers
        self.secret = secret
        self.env = dict(env or FAST)
        self.procs = {}
        self.read = {}  # output already read by wait_for_line, per process

    def _env(self, role, index, secret=None):
        env = dict(os.environ, PYTHONPATH=LOOM_PATH)
        env.update(self.env)
        env.update({"PADDLE_TRAINING_ROLE": role, "PADDLE_PSERVER_ENDPOINTS": ",".join(self.eps),
                    "PADDLE_TRAINERS_NUM": str(self.trainers),
                    "LOOM_PS_SECRET": secret if secret is not None else self.secret})
        if role == "PSERVER":
            env["PADDLE_CURRENT_ENDPOINT"] = self.eps[index]
        else:
            env["PADDLE_TRAINER_ID"] = str(index)
        return env

    def start(self, name, role, index, args=(), secret=None):
        self.procs[name] = subprocess.Popen(
            [sys.executable, WORKER] + list(args), env=self._env(role, index, secret),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def start_all(self, server_args=(), trainer_args=None):
        for s in range(len(self.eps)):
            self.start("server%d" % s, "PSERVER", s, server_args)
        for k in range(self.trainers):
            args = trainer_args(k) if callable(trainer_args) else (trainer_args or ())
            self.start("trainer%d" % k, "TRAINER", k, args)

    def wait(self, name, timeout=60):
        p = self.procs[name]
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, self.read.pop(name, "") + out

    def wait_for_line(self, name, prefix, timeout=60):
        """Reads the process's output until a line starts with prefix (kept for wait())."""
        p = self.procs[name]
        fd = p.stdout.fileno()
        deadline = time.time() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                seen = self.read.get(name, "")
                if seen.startswith(prefix) or ("\n" + prefix) in seen:
                    return
                left = deadline - time.time()
                assert left > 0, "%s printed no line starting %r in %d s:\n%s" % (
                    name, prefix, timeout, seen)
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 65536)
                assert chunk, "%s ended before printing %r:\n%s" % (name, prefix, seen)
                self.read[name] = seen + chunk.decode(errors="replace")

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
        for ep in self.eps:  # a killed server leaves its Unix socket behind (rpc/server.cc)
            path = "/tmp/loom-ps-%s.sock" % ep.split(":")[1]
            if os.path.exists(path):
                os.unlink(path)


@pytest.fixture
def job_factory():
    jobs = []

    def make(*a, **k):
        jobs.append(Job(*a, **k))
        return jobs[-1]
    yield make
    for j in jobs:
        j.stop()


def test_sync_trainer_killed_mid_step_ends_everyone_with_an_error_naming_it(job_factory):
    job = job_factory(2, 2)
    job.start_all(trainer_args=lambda k: ["--steps", "50"] + (["--kill-self-at", "2"] if k == 1 else []))
    begin = time.time()
    code, out = job.wait("trainer1")
    assert code == -signal.SIGKILL
    for s in ("server0", "server1"):
        code, out = job.wait(s, timeout=30)
        assert code != 0, out
        assert "trainer 1" in out and "sent nothing" in out, out
    code, out = job.wait("trainer0", timeout=30)
    assert code != 0 and "trainer 1" in out, out
    assert time.time() - begin < 25


def test_sync_trainer_alive_but_stuck_ends_the_step_with_an_error_naming_it(job_factory):
    job = job_factory(1, 2, env=dict(FAST, LOOM_PS_STEP_TIMEOUT_MS="1500"))
    job.start_all(trainer_args=lambda k: ["--steps", "50"] + (["--hang-at", "2"] if k == 1 else []))
    begin = time.time()
    code, out = job.wait("server0", timeout=30)
    assert code != 0, out
    assert "trainer(s) 1 have not ended it" in out, out
    code, out = job.wait("trainer0", timeout=30)
    assert code != 0 and "trainer(s) 1" in out, out
    assert time.time() - begin < 20


def test_async_trainer_killed_the_rest_carry_on(job_factory):
    job = job_factory(2, 2)
    job.start_all(["--async"], lambda k: ["--async", "--steps", "30"] +
                  (["--kill-self-at", "1"] if k == 1 else []))
    code, _ = job.wait("trainer1")
    assert code == -signal.SIGKILL
    code, out = job.wait("trainer0")
    assert code == 0, out
    assert "trainer done" in out
    for s in ("server0", "server1"):
        code, out = job.wait(s, timeout=30)
        assert code == 0, out
        assert "trainer 1" in out and "serving the other trainers" in out, out


def test_server_killed_every_trainer_errors_naming_it(job_factory):
    job = job_factory(2, 2)
    job.start_all(trainer_args=["--steps", "100000"])
    for k in (0, 1):  # both trainers connected and through a step
        job.wait_for_line("trainer%d" % k, "step 0 ")
    job.procs["server1"].kill()
    begin = time.time()
    for k in (0, 1):
        code, out = job.wait("trainer%d" % k, timeout=30)
        assert code != 0, out
        assert job.eps[1] in out, out
    assert time.time() - begin < 20


def test_missing_close_ends_the_server_after_the_heartbeat_timeout(job_factory):
    job = job_factory(1, 1)
    job.start_all(trainer_args=["--steps", "2", "--no-close"])
    code, out = job.wait("trainer0")
    assert code == 0, out
    code, out = job.wait("server0", timeout=30)
    assert code != 0
    assert "exe.close()" in out, out


def test_wrong_secret_is_refused_and_the_others_train(job_factory):
    job = job_factory(1, 2)
    job.start("server0", "PSERVER", 0)
    job.start("intruder", "TRAINER", 1, ["--steps", "1"], secret="not-the-secret")
    code, out = job.wait("intruder")
    assert code != 0 and "secret" in out, out
    for k in (0, 1):
        job.start("trainer%d" % k, "TRAINER", k, ["--steps", "3"])
    for k in (0, 1):
        code, out = job.wait("trainer%d" % k)
        assert code == 0, out
    code, out = job.wait("server0")
    assert code == 0, out
    assert "refused" in out and "LOOM_PS_SECRET" in out, out


def test_trainers_from_different_programs_are_detected(job_factory):
    job = job_factory(1, 1, env=dict(FAST, LOOM_PS_CONNECT_TIMEOUT_MS="3000"))
    job.start("server0", "PSERVER", 0)
    job.start("trainer0", "TRAINER", 0, ["--hidden", "7"])
    code, out = job.wait("trainer0")
    assert code != 0 and "fingerprint" in out, out
    code, out = job.wait("server0")
    assert code != 0 and "never connected" in out, out


def test_port_in_use_is_a_clear_error(job_factory):
    job = job_factory(1, 1)
    host, port = job.eps[0].split(":")
    s = socket.socket()
    s.bind((host, int(port)))
    s.listen(1)
    try:
        job.start("server0", "PSERVER", 0)
        code, out = job.wait("server0")
    finally:
        s.close()
    assert code != 0
    assert job.eps[0] in out and "in use" in out, out


def test_training_resumed_from_a_checkpoint_equals_training_that_never_stopped(job_factory, tmp_path):
    def run(args_for, server_args=()):
        job = job_factory(2, 2)
        job.start_all(server_args, args_for)
        for k in (0, 1):
            code, out = job.wait("trainer%d" % k)
            assert code == 0, out
        for s in (0, 1):
            code, out = job.wait("server%d" % s)
            assert code == 0, out
        return job

    straight = tmp_path / "straight.npz"
    run(lambda k: ["--steps", "6", "--out", str(straight)])
    ckpt = tmp_path / "ckpt"
    run(lambda k: ["--steps", "3", "--checkpoint", str(ckpt)])
    assert (ckpt / "pserver_0" / "CHECKPOINT").exists() and (ckpt / "pserver_1" / "CHECKPOINT").exists()
    resumed = tmp_path / "resumed.npz"
    run(lambda k: ["--steps", "3", "--first-step", "3", "--out", str(resumed)],
        ["--resume", str(ckpt)])
    a, b = np.load(straight), np.load(resumed)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_fluid_pserver_script_runs_under_loom_launch(tmp_path):
    """The user's view: one script, every role, started by `loom launch`."""
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build, "tools", "loom"))
    out = tmp_path / "final.npz"
    proc = subprocess.run(
        [loom, "launch", "--workers", "2", "--servers", "2", "--timeout", "120", "--",
         sys.executable, WORKER, "--steps", "5", "--out", str(out)],
        capture_output=True, text=True, timeout=180,
        env=dict(os.environ, PYTHONPATH=LOOM_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("trainer done") == 2, proc.stdout
    assert proc.stdout.count("server done") == 2, proc.stdout
    assert "[worker 1] step 4" in proc.stdout and out.exists()


def _read_until(proc, text, timeout=60):
    """Lines of proc's output until one holds text (bounded in time: the job's processes are
    killed by the fixture)."""
    deadline, seen = time.time() + timeout, []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError("no %r in %r" % (text, seen))


def test_ctrl_c_ends_a_waiting_trainer_and_a_serving_server_at_once(job_factory):
    """SIGINT reaches Python as KeyboardInterrupt even while Loom waits in C++: a sync trainer
    waiting for a step that the job's second trainer (never started) never ends, and its server
    serving it, both end within seconds, long before any timeout."""
    job = job_factory(1, 2, env=dict(FAST, LOOM_PS_TIMEOUT_MS="60000",
                                     LOOM_PS_CONNECT_TIMEOUT_MS="60000"))
    job.start("server0", "PSERVER", 0)
    job.start("trainer0", "TRAINER", 0, ["--steps", "3"])
    # The trainer's startup fetched the parameters from the server: the server is serving.
    _read_until(job.procs["trainer0"], "begin step 0")
    outs = {}
    for name in ("trainer0", "server0"):
        begin = time.time()
        job.procs[name].send_signal(signal.SIGINT)
        code, outs[name] = job.wait(name, timeout=20)
        assert code != 0 and "KeyboardInterrupt" in outs[name], outs[name]
        assert time.time() - begin < 10, outs[name]
    assert "interrupted (SIGINT) while pserver 0" in outs["server0"], outs["server0"]
