#!/bin/bash
# gimbal TaskProlog (runs as the job's user before each task; slurm.conf: TaskProlog=...).
# Its "export NAME=value" lines on stdout go into the task's environment: point CUDA clients at
# the per-job MPS daemon that prolog.sh started on this node, if there is one.
_here=${BASH_SOURCE[0]%/*}
# shellcheck source=hooklib.sh
. "$_here/hooklib.sh" 2>/dev/null || exit 0
_gh_load_config 2>/dev/null
_gh_job_ids
if [ -n "$_GH_JOB" ]; then
  d=$(_gh_mps_dir)
  if [ -d "$d/pipe" ]; then
    echo "export CUDA_MPS_PIPE_DIRECTORY=$d/pipe"
    echo "export CUDA_MPS_LOG_DIRECTORY=$d/log"
  fi
fi
exit 0
