# shellcheck shell=bash
# Shared code for gimbal's slurmd Prolog/Epilog/TaskProlog (sourced, never run directly).
#
# Rules for these hooks: fast, bounded by timeouts, never block, never evaluate job-controlled
# strings (the job comment, names, paths), and the node hooks ALWAYS exit 0: a failing Prolog or
# Epilog would drain the node.
#
# Settings (defaults < config file < environment of the hook):
#   GIMBAL_HOOK_LOG_DIR  events log directory           (/var/log/gimbal/hooks)
#   GIMBAL_MPS_DIR       per-job MPS pipe/log dirs base (/run/gimbal/mps)
#   GIMBAL_MPS           auto | off                     (auto)
#   GIMBAL_HOOK_TIMEOUT  seconds per external command   (10)
# Config file: $GIMBAL_HOOKS_CONF, else gimbal-hooks.conf next to $SLURM_CONF, else
# /etc/gimbal/hooks.conf. It is parsed as KEY=VALUE lines (never sourced); bad values are ignored.

_gh_defaults() {
  _GH_LOG_DIR=/var/log/gimbal/hooks
  _GH_MPS_DIR=/run/gimbal/mps
  _GH_MPS=auto
  _GH_TIMEOUT=10
}

# _gh_set KEY VALUE: validate and apply one setting
_gh_set() {
  case "$1" in
    GIMBAL_HOOK_LOG_DIR) [[ "$2" =~ ^/[A-Za-z0-9._/-]+$ ]] && _GH_LOG_DIR=$2 ;;
    GIMBAL_MPS_DIR)      [[ "$2" =~ ^/[A-Za-z0-9._/-]+$ ]] && _GH_MPS_DIR=$2 ;;
    GIMBAL_MPS)          [[ "$2" =~ ^(auto|off)$ ]] && _GH_MPS=$2 ;;
    GIMBAL_HOOK_TIMEOUT) [[ "$2" =~ ^[0-9]{1,3}$ ]] && [ "$2" -gt 0 ] && _GH_TIMEOUT=$2 ;;
  esac
  return 0
}

_gh_load_config() {
  _gh_defaults
  local f line k
  if [ -n "${GIMBAL_HOOKS_CONF:-}" ]; then f=$GIMBAL_HOOKS_CONF
  elif [ -n "${SLURM_CONF:-}" ] && [ -f "${SLURM_CONF%/*}/gimbal-hooks.conf" ]; then f=${SLURM_CONF%/*}/gimbal-hooks.conf
  else f=/etc/gimbal/hooks.conf; fi
  if [ -f "$f" ] && [ -r "$f" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      case "$line" in ''|'#'*) continue ;; *=*) _gh_set "${line%%=*}" "${line#*=}" ;; esac
    done < <(head -c 4096 "$f")
  fi
  for k in GIMBAL_HOOK_LOG_DIR GIMBAL_MPS_DIR GIMBAL_MPS GIMBAL_HOOK_TIMEOUT; do
    [ -n "${!k:-}" ] && _gh_set "$k" "${!k}"
  done
  return 0
}

# _gh_clean VALUE: a log-safe token (no spaces, no control chars, bounded length)
_gh_clean() {
  local v=${1:0:128}
  v=${v//[^A-Za-z0-9._,:\/()+-]/_}
  printf '%s' "${v:--}"
}

# job identity, validated: numeric ids and a plain node name, or empty
_gh_job_ids() {
  _GH_JOB=""; _GH_NODE=""; _GH_UID=""; _GH_GID=""
  [[ "${SLURM_JOB_ID:-}" =~ ^[0-9]{1,12}$ ]] && _GH_JOB=$SLURM_JOB_ID
  [[ "${SLURMD_NODENAME:-}" =~ ^[A-Za-z0-9._-]{1,64}$ ]] && _GH_NODE=$SLURMD_NODENAME
  [[ "${SLURM_JOB_UID:-}" =~ ^[0-9]{1,10}$ ]] && _GH_UID=$SLURM_JOB_UID
  [[ "${SLURM_JOB_GID:-}" =~ ^[0-9]{1,10}$ ]] && _GH_GID=$SLURM_JOB_GID
  return 0
}

# per-job MPS directory; the node name is part of it so that several slurmd on one host (test
# clusters) do not share one
_gh_mps_dir() { printf '%s/job%s-%s' "$_GH_MPS_DIR" "$_GH_JOB" "${_GH_NODE:-node}"; }

# true when the job was given an MPS share on this node
_gh_job_has_mps() {
  [[ "${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-}" =~ ^[0-9]+$ ]] && return 0
  case ",${SLURM_JOB_GRES:-}," in *,gres/mps*|*,mps:*|*,mps,*|*gres:mps*) return 0 ;; esac
  return 1
}

# _gh_event EVENT KEY=VALUE...: append one line to events.log (one write(2) with O_APPEND)
_gh_event() {
  local line kv
  line="ts=$(date +%s) event=$1 cluster=$(_gh_clean "${SLURM_CLUSTER_NAME:-}") job=${_GH_JOB:--} node=${_GH_NODE:--} uid=${_GH_UID:--}"
  shift
  for kv in "$@"; do line+=" ${kv%%=*}=$(_gh_clean "${kv#*=}")"; done
  { mkdir -p "$_GH_LOG_DIR" && printf '%s\n' "$line" >> "$_GH_LOG_DIR/events.log"; } 2>/dev/null \
    || logger -t gimbal-hook -- "$line" 2>/dev/null || true
}

# _gh_mps_ctl [args...]: nvidia-cuda-mps-control with the job's MPS dirs, as the job's user
# when we are root, bounded by a timeout. stdin is passed through.
_gh_mps_ctl() {
  local d; d=$(_gh_mps_dir)
  local as=()
  if [ "$(id -u)" = 0 ] && [ -n "$_GH_UID" ] && [ "$_GH_UID" != 0 ] && [ -n "$_GH_GID" ]; then
    as=(setpriv --reuid="$_GH_UID" --regid="$_GH_GID" --clear-groups)
  fi
  env CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log" \
    timeout -k 2 "$_GH_TIMEOUT" "${as[@]}" nvidia-cuda-mps-control "$@"
}
