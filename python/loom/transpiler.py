"""Fluid's DistributeTranspiler: parameter-server training.

    t = fluid.DistributeTranspiler(config=fluid.DistributeTranspilerConfig())
    t.transpile(trainer_id, program=main, pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2,
                sync_mode=True, startup_program=startup)
    # server:  prog, pstartup = t.get_pserver_programs(endpoint); exe.run(pstartup); exe.run(prog)
    # trainer: exe.run(startup); prog = t.get_trainer_program(); ... exe.run(prog, ...); exe.close()

The rewriting is Loom's C++ pipeline (``loom transpile --mode pserver``). transpile() turns the
given startup program into this trainer's startup in place (as Fluid does): it no longer
initializes the parameters but fetches them from the servers, so every trainer starts from the
servers' values (the single-device startup's initializers, run on the servers). Servers and
trainers prove the shared secret LOOM_PS_SECRET to each other (``loom launch`` sets it).
"""

from . import core
from ._mpi import mpi_cleanup
from .framework import Program, default_main_program, default_startup_program
from .scope import global_scope


class RoundRobin:
    """Blocks placed on servers in turn (Fluid's split method)."""
    name = "round_robin"


class HashName:
    """Blocks placed on the server a stable hash of their name picks (FNV-1a, the same in every
    process, unlike Python's hash())."""
    name = "hash"


class Bytes:
    """Loom's balanced placement: the largest block first onto the least-loaded server."""
    name = "bytes"


class DistributeTranspilerConfig:
    """slice_var_up: cut parameters into blocks over the servers; split_method: RoundRobin,
    HashName or Bytes (a class or its name); min_block_size: the fewest elements of a block;
    mode: "pserver"; "nccl2" (Fluid's collective mode: every process a trainer, gradients
    allreduced across processes; the programs are not rewritten, and CompiledProgram's
    with_data_parallel runs them with the processes as ranks); or "hybrid" (pserver mode whose
    trainers are MPI clients: started by ``loom launch --workers N --servers S --clients C``,
    the servers see one trainer per client; a client allreduces its gradients over its own MPI
    world, weighted by each process's batch rows, its rank 0 alone sends them and receives the
    parameters, and broadcasts them to the client)."""

    def __init__(self):
        self.slice_var_up = True
        self.split_method = RoundRobin
        self.min_block_size = 8192
        self.mode = "pserver"
        self.sync_mode = None  # transpile()'s sync_mode wins when this is None

    def _split(self):
        m = self.split_method
        name = getattr(m, "name", m)
        if name not in ("round_robin", "hash", "bytes", "RoundRobin", "HashName"):
            raise ValueError("DistributeTranspilerConfig.split_method must be RoundRobin, "
                             "HashName or Bytes, got %r" % (m,))
        return name


def _job_int(job, key, name, where, unset):
    value = job[key]
    if value == unset:
        raise RuntimeError("DistributeTranspiler (hybrid): %s is unset; %s" % (name, where))
    return value


def _client_layout(workers):
    """(servers' trainers, this client, client size, rank in it) of a hybrid job from the
    launcher's variables; in a server process only the first is known."""
    how = ("hybrid mode runs under `loom launch --workers N --servers S --clients C -- "
           "python3 train.py`")
    job = core.job_env()
    clients = _job_int(job, "clients", "LOOM_NUM_CLIENTS", how, 0)
    if clients < 1 or (isinstance(workers, int) and clients > workers):
        raise ValueError("DistributeTranspiler (hybrid): %d clients for %r workers"
                         % (clients, workers))
    if job["role"] == "PSERVER":
        return clients, 0, 1, 0
    client = _job_int(job, "client_id", "LOOM_CLIENT_ID", how, -1)
    size = _job_int(job, "client_size", "LOOM_CLIENT_SIZE", how, 0)
    rank = _job_int(job, "client_rank", "LOOM_CLIENT_RANK", how, -1)
    if not 0 <= client < clients or not 0 <= rank < size:
        raise ValueError("DistributeTranspiler (hybrid): client %d rank %d is not in %d clients "
                         "of %d" % (client, rank, clients, size))
    return clients, client, size, rank


def _program_of(desc):
    p = Program(desc)
    p._sync_with_desc()
    return p


class DistributeTranspiler:
    def __init__(self, config=None):
        self.config = config or DistributeTranspilerConfig()
        if self.config.mode not in ("pserver", "nccl2", "hybrid"):
            raise ValueError("DistributeTranspiler: mode %r is not supported (pserver, nccl2, "
                             "hybrid)" % (self.config.mode,))
        self._result = None

    def transpile(self, trainer_id, program=None, pservers="127.0.0.1:6174", trainers=1,
                  sync_mode=True, startup_program=None, current_endpoint="127.0.0.1:6174"):
        """Rewrites for trainers talking to the servers in pservers ("host:port,..."). The
        startup program becomes trainer_id's startup in place; get_trainer_program() and
        get_pserver_program(s)() return the rest.

        In hybrid mode trainer_id and trainers are the worker's id and the number of workers as
        launched; the clients (LOOM_NUM_CLIENTS, LOOM_CLIENT_ID, LOOM_CLIENT_RANK,
        LOOM_CLIENT_SIZE, set by ``loom launch --clients``) are the servers' trainers."""
        main = program or default_main_program()
        startup = startup_program or default_startup_program()
        if self.config.mode == "nccl2":
            return self._transpile_nccl2(trainer_id, main, trainers)
        eps = [e.strip() for e in (pservers.split(",") if isinstance(pservers, str) else pservers)]
        if not isinstance(trainers, int) or trainers < 1:
            raise ValueError("transpile: trainers must be a positive int, got %r" % (trainers,))
        if not isinstance(trainer_id, int) or not 0 <= trainer_id < trainers:
            raise ValueError("transpile: trainer_id %r is not in 0..%d" % (trainer_id, trainers - 1))
        sync = sync_mode if self.config.sync_mode is None else self.config.sync_mode
        client_size, client_rank = 1, 0
        if self.config.mode == "hybrid":
            trainers, trainer_id, client_size, client_rank = _client_layout(trainers)
        out = core.transpile_pserver(startup.desc, main.desc, trainers, eps, bool(sync),
                                     bool(self.config.slice_var_up), self.config._split(),
                                     int(self.config.min_block_size), client_size, client_rank)
        tstart, tmain, pstart, pmain, manifest = out
        self._endpoints = eps
        self._trainer_id = trainer_id
        self._trainer_startups, self._trainer_mains = tstart, tmain
        self._pserver_startups, self._pserver_mains = pstart, pmain
        self.manifest = manifest
        self._origin_startup = startup.desc.clone()
        # Fluid rewrites the startup program in place: the trainer's startup fetches parameters.
        startup._replace_desc(tstart[trainer_id])
        main_out = _program_of(tmain[trainer_id])
        main_out.random_seed = getattr(main, "random_seed", 0)
        self._trainer_program = main_out
        self._result = out
        if client_size > 1:
            # The client's communicator (a persistable variable of the scope the programs run
            # in) goes before MPI is finalized at exit.
            mpi_cleanup.track(global_scope(), ["@LOOM_CLIENT_COMM@"])

    def _transpile_nccl2(self, trainer_id, main, trainers):
        """nccl2: trainers is their count or their endpoints ("host:port,..."); the program is
        marked so that with_data_parallel makes this process trainer `trainer_id` of them."""
        if isinstance(trainers, str):
            trainers = len([e for e in trainers.split(",") if e.strip()])
        if not isinstance(trainers, int) or trainers < 1:
            raise ValueError("transpile (nccl2): trainers must be a count or endpoints, got %r"
                             % (trainers,))
        if not isinstance(trainer_id, int) or not 0 <= trainer_id < trainers:
            raise ValueError("transpile (nccl2): trainer_id %r is not in 0..%d"
                             % (trainer_id, trainers - 1))
        main._nccl2 = (trainers, trainer_id)
        self._trainer_program = main
        self._result = ("nccl2",)

    def _check(self):
        if self._result is None:
            raise RuntimeError("DistributeTranspiler: call transpile() first")

    def get_trainer_program(self, wait_port=True):
        """This trainer's main program (transpile()'s trainer_id)."""
        self._check()
        return self._trainer_program

    def _server_index(self, endpoint):
        self._check()
        if endpoint not in self._endpoints:
            raise ValueError("%r is not one of the pservers %s" % (endpoint, self._endpoints))
        return self._endpoints.index(endpoint)

    def get_pserver_program(self, endpoint):
        """The main program of the server at endpoint: listen_and_serv and its optimize blocks."""
        return _program_of(self._pserver_mains[self._server_index(endpoint)])

    def get_startup_program(self, endpoint, pserver_program=None, startup_program=None):
        """The startup program of the server at endpoint."""
        return _program_of(self._pserver_startups[self._server_index(endpoint)])

    def get_pserver_programs(self, endpoint):
        """(main, startup) of the server at endpoint."""
        return self.get_pserver_program(endpoint), self.get_startup_program(endpoint)


def rpc_ops(program):
    """(trainer_id, endpoints, fingerprint) of the parameter-server ops in program, or None."""
    block = program.desc.block(0)
    for i in range(block.op_size()):
        op = block.op(i)
        if op.type() in ("send", "recv", "send_barrier", "fetch_barrier"):
            return (op.attr("trainer_id"), list(op.attr("endpoints")), op.attr("fingerprint"))
    return None


def pserver_id(program):
    """The server index of a server program (listen_and_serv's pserver_id), or None."""
    block = program.desc.block(0)
    for i in range(block.op_size()):
        op = block.op(i)
        if op.type() == "listen_and_serv":
            return op.attr("pserver_id")
    return None
