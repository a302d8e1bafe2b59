"""The lifetime of MPI in this process, shared by the users of MPI (CompiledProgram's "mpi"
transport, a hybrid DistributeTranspiler's clients, KVStores of the *_mpi types): an uncaught
exception ends the whole job, and at exit the communicators go before MPI is finalized."""
import atexit
import gc
import os
import sys

from . import core

_abort_installed = False


def abort_mpi_job_on_uncaught_exception():
    """An exception nobody catches on one rank ends the whole MPI job at once with that rank's
    error (as `loom run` does), instead of leaving the other ranks waiting in their collectives
    until the timeout. Installed once (sys.excepthook), by the first MPI user of the process."""
    global _abort_installed
    if _abort_installed:
        return
    _abort_installed = True
    previous = sys.excepthook

    def abort_job(kind, value, tb):
        previous(kind, value, tb)
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", "?")
        sys.stderr.write("loom: rank %s: uncaught %s: ending the MPI job\n"
                         % (rank, kind.__name__))
        sys.stderr.flush()
        core.mpi_abort(1)

    sys.excepthook = abort_job


class MpiCleanup:
    """At exit: drops the MPI communicators (scope variables) of compiled programs and hybrid
    clients, then finalizes MPI, so that mpirun sees every rank end cleanly."""

    def __init__(self):
        self._comms = []
        self._registered = False

    def track(self, scope, names):
        self._comms.append((scope, list(names)))
        if not self._registered:
            atexit.register(self.finalize)
            abort_mpi_job_on_uncaught_exception()
            self._registered = True

    def finalize(self):
        for scope, names in self._comms:
            for name in names:
                scope.erase_local_var(name)
        self._comms = []
        gc.collect()
        core.mpi_finalize()


mpi_cleanup = MpiCleanup()
