#!/bin/bash
# gimbal slurmd Prolog (root, on each allocated node; slurm.conf: Prolog=..., PrologFlags=Alloc).
#  - records the job start in $GIMBAL_HOOK_LOG_DIR/events.log
#  - when the job got an MPS share (gres/mps) and nvidia-cuda-mps-control exists, starts a
#    per-job MPS control daemon (pipe dir $GIMBAL_MPS_DIR/job<id>-<node>/pipe, as the job's user,
#    limited to the job's GPUs). TaskProlog exports CUDA_MPS_PIPE_DIRECTORY for the job.
# Always exits 0 (a failing Prolog drains the node); problems are logged.
_here=${BASH_SOURCE[0]%/*}
# shellcheck source=hooklib.sh
. "$_here/hooklib.sh" 2>/dev/null || exit 0
{
  _gh_load_config
  _gh_job_ids
  mps=no
  if [ -z "$_GH_JOB" ]; then
    mps=no-job-id
  elif _gh_job_has_mps; then
    if [ "$_GH_MPS" = off ]; then mps=disabled
    elif ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then mps=absent
    else
      d=$(_gh_mps_dir)
      if mkdir -p "$d/pipe" "$d/log" && chmod 700 "$d" \
         && { [ "$(id -u)" != 0 ] || [ -z "$_GH_UID" ] || chown -R "$_GH_UID:${_GH_GID:-$_GH_UID}" "$d"; }; then
        if CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-}" _gh_mps_ctl -d </dev/null >/dev/null 2>&1; then
          mps=started
        else
          mps=start-failed
        fi
      else
        mps=mkdir-failed
      fi
    fi
  fi
  _gh_event prolog "gpus=${CUDA_VISIBLE_DEVICES:-}" "mps_pct=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-}" "mps=$mps"
} 2>/dev/null
exit 0
