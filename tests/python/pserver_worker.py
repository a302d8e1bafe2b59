"""One process of a parameter-server job, as a Fluid pserver script is written (the role and
endpoints from Paddle's environment variables). Used by test_pserver_faults.py.

    PADDLE_TRAINING_ROLE=PSERVER|TRAINER PADDLE_PSERVER_ENDPOINTS=... PADDLE_TRAINER_ID=K
    PADDLE_TRAINERS_NUM=T PADDLE_CURRENT_ENDPOINT=... python3 pserver_worker.py [options]
"""
import argparse
import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom as fluid  # noqa: E402
from pserver_util import batches, build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--first-step", type=int, default=0, help="batches to skip (a resumed run)")
    ap.add_argument("--async", dest="sync", action="store_false")
    ap.add_argument("--opt", default="adam")
    ap.add_argument("--hidden", type=int, default=6)
    ap.add_argument("--kill-self-at", type=int, default=-1, help="SIGKILL before this step")
    ap.add_argument("--hang-at", type=int, default=-1, help="sleep 60 s before this step")
    ap.add_argument("--no-close", action="store_true", help="exit without exe.close()")
    ap.add_argument("--checkpoint", default="", help="trainer 0: save_persistables at the end")
    ap.add_argument("--resume", default="", help="server: load_persistables before serving")
    ap.add_argument("--out", default="", help="trainer 0: write final params here (.npz)")
    a = ap.parse_args()
    role = os.environ["PADDLE_TRAINING_ROLE"]
    eps = os.environ["PADDLE_PSERVER_ENDPOINTS"]
    trainers = int(os.environ["PADDLE_TRAINERS_NUM"])
    trainer_id = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    main_prog, startup, loss, params = build(opt=a.opt, hidden=a.hidden)
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id, program=main_prog, pservers=eps, trainers=trainers,
                sync_mode=a.sync, startup_program=startup)
    exe = fluid.Executor(fluid.CPUPlace())
    if role == "PSERVER":
        prog, pstartup = t.get_pserver_programs(os.environ["PADDLE_CURRENT_ENDPOINT"])
        exe.run(pstartup)
        if a.resume:
            fluid.io.load_persistables(exe, a.resume, prog)
        exe.run(prog)
        print("server done", flush=True)
        return
    exe.run(startup)
    prog = t.get_trainer_program()
    data = batches(a.first_step + a.steps, 4 * trainers, seed=11)[a.first_step:]
    for step, (x, y) in enumerate(data):
        if step == a.kill_self_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == a.hang_at:
            time.sleep(60)
        rows = slice(4 * trainer_id, 4 * trainer_id + 4)
        print("begin step", step, flush=True)
        out = exe.run(prog, feed={"x": x[rows], "y": y[rows]}, fetch_list=[loss])
        print("step", step, float(out[0][0]), flush=True)
    if a.checkpoint and trainer_id == 0:
        fluid.io.save_persistables(exe, a.checkpoint, prog)
    if a.out and trainer_id == 0:
        scope = fluid.global_scope()
        np.savez(a.out, **{n: np.array(scope.find_var(n).get_tensor()) for n in params})
    if not a.no_close:
        exe.close()
    print("trainer done", flush=True)


if __name__ == "__main__":
    main()
