#!/bin/bash
# gimbal slurmd Epilog (root, on each node of the job; slurm.conf: Epilog=...).
#  - stops the job's MPS control daemon if the Prolog started one ("quit" on its pipe dir),
#    then removes the per-job MPS dir
#  - records the job end (with its exit code) in $GIMBAL_HOOK_LOG_DIR/events.log
# Always exits 0 (a failing Epilog drains the node); problems are logged.
_here=${BASH_SOURCE[0]%/*}
# shellcheck source=hooklib.sh
. "$_here/hooklib.sh" 2>/dev/null || exit 0
{
  _gh_load_config
  _gh_job_ids
  mps=no
  if [ -n "$_GH_JOB" ]; then
    d=$(_gh_mps_dir)
    if [ -d "$d" ]; then
      if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then mps=absent
      elif echo quit | _gh_mps_ctl >/dev/null 2>&1; then mps=stopped
      else mps=stop-failed
      fi
      rm -rf --one-file-system "$d" || mps="$mps,rm-failed"
    fi
  fi
  ec=${SLURM_JOB_EXIT_CODE2:-${SLURM_JOB_EXIT_CODE:-}}
  _gh_event epilog "exit=$ec" "mps=$mps"
} 2>/dev/null
exit 0
