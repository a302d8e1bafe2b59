#!/usr/bin/env bash
# Hierarchical allreduce (2 processes x 2 places: in-process reduce, MPI across, in-process
# broadcast; collective/hierarchical.h) beside flat MPI over 4 processes (Open MPI's own
# MPI_Allreduce), fp32 sum 1-64 MiB, busbw over the 4 places in both (nccl-tests' definition).
# Usage: bash bench/collective/hierarchical.sh   (needs a build with MPI)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=build/bench/collective
printf '%10s %22s %22s\n' bytes "hierarchical 2x2 GB/s" "flat MPI 4 procs GB/s"
paste <(mpirun --oversubscribe -np 2 $B/collective_hierarchical_bench 2 | grep RESULT) \
      <(mpirun --oversubscribe -np 4 $B/collective_mpi_bench 1048576 67108864 | grep RESULT) |
  awk '{ printf "%10d %22.2f %22.2f\n", $3, $5, $10 }'
