#!/bin/bash
# Run a command inside the Slurm 26.05 test chroot (made by bringup-26.05.sh), with this repo
# bind-mounted at the same path, the chroot venv first on PATH and the repo on PYTHONPATH.
#
#   tests/slurm/in-chroot.sh squeue --json
#   tests/slurm/in-chroot.sh python -m pytest tests/slurm -k 2605
#   tests/slurm/in-chroot.sh gimbalctl daemon --once --backend pyslurm
#
# The working directory is kept when it is inside the repo. Selected variables pass through:
# GIMBAL_*, PYTEST_*, SLURM_* (except SLURM_CONF: the chroot cluster's /etc/slurm-gimbal/slurm.conf,
# or /etc/slurm-<instance>/slurm.conf with GIMBAL_CHROOT_INSTANCE=<instance>, e.g. gimbal-het).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
R=${GIMBAL_SID_ROOT:-/var/lib/gimbal-test/sid}
VENV=/opt/gimbal-venv
[ "$(id -u)" = 0 ] || { echo "in-chroot.sh: must run as root" >&2; exit 1; }
[ -x "$R/usr/bin/env" ] || { echo "in-chroot.sh: no chroot at $R (run tests/slurm/bringup-26.05.sh)" >&2; exit 1; }
[ $# -gt 0 ] || set -- bash
INST=${GIMBAL_CHROOT_INSTANCE:-gimbal}
[[ "$INST" =~ ^[a-z0-9-]+$ ]] || { echo "in-chroot.sh: bad GIMBAL_CHROOT_INSTANCE" >&2; exit 2; }
mountpoint -q "$R/proc"    || mount -t proc proc "$R/proc"
mountpoint -q "$R/dev"     || mount --bind /dev "$R/dev"
mountpoint -q "$R/dev/pts" || mount --bind /dev/pts "$R/dev/pts"
# a mount left by an earlier checkout at the same path (deleted since) would keep the chroot in a
# dead directory ("getcwd failed"): bind only when the mount there is not this repo
if ! mountpoint -q "$R$REPO" || [ "$(stat -c %d:%i "$REPO")" != "$(stat -c %d:%i "$R$REPO" 2>/dev/null)" ]; then
  if mountpoint -q "$R$REPO"; then umount -l "$R$REPO"; fi
  mkdir -p "$R$REPO"; mount --bind "$REPO" "$R$REPO"
fi
CWD=$REPO
case "$PWD/" in "$REPO"/*) CWD=$PWD ;; esac
PASS=()
while IFS='=' read -r k v; do
  case "$k" in GIMBAL_SID_ROOT|SLURM_CONF) ;; GIMBAL_*|PYTEST_*|SLURM_*) PASS+=("$k=$v") ;; esac
done < <(env)
exec chroot "$R" /usr/bin/env -i PATH="$VENV/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root LANG=C.UTF-8 \
  PYTHONPATH="$REPO" SLURM_CONF=/etc/slurm-$INST/slurm.conf GIMBAL_IN_CHROOT=1 \
  PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt PYTHONDONTWRITEBYTECODE=1 "${PASS[@]}" \
  /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$CWD" "$@"
