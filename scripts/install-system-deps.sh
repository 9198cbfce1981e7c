#!/usr/bin/env bash
# Debian packages gpuwrite's tests use: rdma-core's headers (mlx5dv.h, for the WQE/CQE-bytes
# reference tests), pyverbs (QP attributes checked against its objects), Open MPI (the
# mpi4py bootstrap test; libopenmpi-dev lets pip build mpi4py), and a C compiler (cffi
# builds csrc/ at install time).
set -eu
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
need=""
[ -f /usr/include/infiniband/mlx5dv.h ] || need="$need libibverbs-dev"
[ -d /usr/lib/python3/dist-packages/pyverbs ] || need="$need python3-pyverbs"
command -v mpirun >/dev/null || need="$need openmpi-bin"
[ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || command -v mpicc >/dev/null || need="$need libopenmpi-dev"
command -v gcc >/dev/null || need="$need gcc"
if [ -n "$need" ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $need
fi
