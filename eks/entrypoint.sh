#!/bin/bash
# Entry point of the dptrain image. Without arguments (the MPI Operator's worker pods) it runs
# sshd in the foreground, through which the launcher's mpirun starts the ranks. With arguments
# (the launcher, or `docker run IMAGE build/dptrain --help`) it runs them.
set -e
if [ $# -eq 0 ]; then
  mkdir -p /run/sshd
  exec /usr/sbin/sshd -De
fi
exec "$@"
