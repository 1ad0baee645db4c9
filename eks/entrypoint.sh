#!/bin/bash
# Entry point of the dptrain image. Without arguments (the MPI Operator's worker pods) it runs
# sshd, through which the launcher's mpirun starts the ranks. With arguments (the launcher, or
# `docker run IMAGE dptrain --help`) it runs them under dptrain-run, so that the SIGTERM
# Kubernetes sends the pod ends the job with a checkpoint and exit 75.
set -e
if [ $# -eq 0 ]; then
  # Kubernetes sends SIGTERM to the container's PID 1 alone, and when PID 1 ends the kernel kills
  # every other process of the container: with sshd as PID 1 (exec), a worker pod deleted,
  # drained or reclaimed took its ranks down without a checkpoint. So this shell stays PID 1,
  # passes SIGTERM on to the ranks here (they checkpoint, with the other workers' ranks, and exit
  # 75), and waits for them before it ends, up to DPTRAIN_STOP_GRACE seconds (keep it below the
  # pod's terminationGracePeriodSeconds). SSHD names the server to run (tests).
  sshd=${SSHD:-/usr/sbin/sshd -De}
  grace=${DPTRAIN_STOP_GRACE:-100}
  mkdir -p /run/sshd 2>/dev/null || true
  ranks() {  # the PIDs of this container's dptrain processes (no procps in the image)
    local d
    for d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = dptrain ] && echo "${d#/proc/}"; done
    return 0
  }
  stop() {
    trap '' TERM INT
    local pids
    pids=$(ranks)
    if [ -n "$pids" ]; then
      echo "entrypoint: SIGTERM: passed on to the ranks ($(echo $pids)); waiting up to ${grace} s for their checkpoint"
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in $(seq "$grace"); do [ -z "$(ranks)" ] && break; sleep 1; done
    fi
    kill "$server" 2>/dev/null || true
    exit 0
  }
  trap stop TERM INT
  $sshd &
  server=$!
  set +e
  wait "$server"
  exit $?
fi
exec dptrain-run "$@"
