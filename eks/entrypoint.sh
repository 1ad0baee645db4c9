#!/bin/bash
# Entry point of the dptrain image. Without arguments (the MPI Operator's worker pods) it runs
# sshd in the foreground, through which the launcher's mpirun starts the ranks. With arguments
# (the launcher, or `docker run IMAGE dptrain --help`) it runs them under dptrain-run, so that
# the SIGTERM Kubernetes sends the pod ends the job with a checkpoint and exit 75.
set -e
if [ $# -eq 0 ]; then
  mkdir -p /run/sshd
  exec /usr/sbin/sshd -De
fi
exec dptrain-run "$@"
