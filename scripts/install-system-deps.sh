#!/usr/bin/env bash
# Debian packages gpuwrite's tests use: rdma-core's headers (mlx5dv.h, for the WQE-bytes
# reference test) and a C compiler (cffi builds csrc/ at install time).
set -eu
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
need=""
[ -f /usr/include/infiniband/mlx5dv.h ] || need="$need libibverbs-dev"
command -v gcc >/dev/null || need="$need gcc"
if [ -n "$need" ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $need
fi
