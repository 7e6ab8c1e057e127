#!/usr/bin/env bash
# Runs an MPI test program under mpirun with NP oversubscribed ranks (this machine may have
# fewer cores than ranks). CI runs as root, which Open MPI refuses unless told otherwise. When
# mpirun cannot start ranks here at all (no launcher, a sandbox without the sockets it needs),
# the test is skipped (exit 77) with mpirun's own words, rather than failed.
#   run_mpi_test.sh MPIEXEC NP PROGRAM [ARGS...]
set -u
mpiexec=$1
np=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's shared-memory transport copies between processes with CMA (process_vm_readv),
# which containers often forbid; plain copies through the segment work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
args=(--oversubscribe -np "$np")
if [ "$(id -u)" = 0 ]; then args=(--allow-run-as-root "${args[@]}"); fi

if ! probe=$(timeout 60 "$mpiexec" "${args[@]}" true 2>&1); then
  echo "SKIP: $mpiexec cannot start $np ranks on this machine:"
  echo "$probe"
  exit 77
fi
exec timeout 300 "$mpiexec" "${args[@]}" "$@"
