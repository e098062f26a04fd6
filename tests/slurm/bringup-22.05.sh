#!/bin/bash
# Bring up the gimbal test cluster on Slurm 22.05 (Debian bookworm packages) on this host,
# loopback only. Idempotent: installs what is missing, keeps running daemons, waits until every
# node is idle, and fails loudly (with the daemons' log tails) otherwise.
#
#   sudo bash tests/slurm/bringup-22.05.sh          # cluster "gimbal": gpu1-3 (4 GPUs, 16 shards
#                                                    # each) + mps1 (2 GPUs, mps:200); port 6837;
#                                                    # SLURM_CONF=/etc/slurm-gimbal/slurm.conf
#   sudo VARIANT=mps bash tests/slurm/bringup-22.05.sh
#                                                    # cluster "gimbalmps": m1, m2 (2 GPUs, mps:200
#                                                    # each, NO shard) on port 6847, next to it;
#                                                    # SLURM_CONF=/etc/slurm-gimbal-mps/slurm.conf
# Neither touches /etc/slurm (a site's or another lab cluster's config stays as it is).
#   sudo VARIANT=het bash tests/slurm/bringup-22.05.sh
#                                                    # cluster "gimbalhet": h1 (gpu:k80:2), h2
#                                                    # (gpu:v100:2) on port 6857: GPU types
#                                                    # SLURM_CONF=/etc/slurm-gimbal-het/slurm.conf
#   sudo VARIANT=dbd bash tests/slurm/bringup-22.05.sh
#                                                    # cluster "gimbaldbd": d1, d2 (gpu:4 each) on
#                                                    # port 6867 with accounting: slurmdbd on
#                                                    # 127.0.0.1:6869 + MariaDB (unix socket only):
#                                                    # sacct history (seed 003 A-SRPT)
#                                                    # SLURM_CONF=/etc/slurm-gimbal-dbd/slurm.conf
#   FRESH=1 ...                                      # forget saved jobs / node state
#   bash tests/slurm/bringup-22.05.sh stop           # stop (VARIANT=mps: that cluster only)
#
# Why a variant: Slurm gives MPS jobs CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=0 when GresTypes lists
# both shard and mps (22.05 and 26.05), so MPS percentages are tested on "gimbalmps".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
VARIANT=${VARIANT:-main}
case "$VARIANT" in
  main) CONF=$HERE/conf-22.05; INSTANCE=gimbal ;;
  mps)  CONF=$HERE/conf-22.05-mps; INSTANCE=gimbal-mps ;;
  het)  CONF=$HERE/conf-22.05-het; INSTANCE=gimbal-het ;;
  dbd)  CONF=$HERE/conf-22.05-dbd; INSTANCE=gimbal-dbd ;;
  *) echo "bringup-22.05: unknown VARIANT=$VARIANT (main|mps|het|dbd)" >&2; exit 2 ;;
esac
export INSTANCE DEBIAN_FRONTEND=noninteractive
T0=$SECONDS
# t LABEL CMD...: run CMD, print how long it took
t() { local l=$1 s=$SECONDS rc=0; shift; "$@" || rc=$?; echo "[timing] 22.05 $l: $((SECONDS-s)) s" >&2; return $rc; }
die() { echo "bringup-22.05: ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (apt-get, daemons, mknod)"
if [ "${1:-}" = stop ]; then
  [ -x /usr/sbin/slurmctld ] || exit 0
  exec bash "$HERE/lib/clusterctl.sh" stop
fi

PKGS="munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins"
[ "$VARIANT" = dbd ] && PKGS="$PKGS mariadb-server slurmdbd"
missing=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"; done
if [ -n "$missing" ]; then
  t "apt-get update" apt-get update -qq || die "apt-get update failed"
  # slurm-wlm-basic-plugins pulls liblua5.1 for job_submit/lua
  t "apt-get install" apt-get install -y -qq --no-install-recommends $PKGS >/dev/null || die "apt-get install$missing failed"
fi
release=$(dpkg-query -W -f='${Version}' slurmctld)
case "$release" in 22.05.*) ;; *) echo "bringup-22.05: warning: slurmctld is $release, not 22.05" >&2 ;; esac
[ -f /usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so ] || ls /usr/lib/*/slurm-wlm/job_submit_lua.so >/dev/null 2>&1 \
  || die "job_submit_lua.so not installed"
id alice >/dev/null 2>&1 || useradd -m -s /bin/bash alice       # an unprivileged test user
id bob >/dev/null 2>&1 || useradd -m -s /bin/bash bob           # a second one (A-SRPT history)
t "install configs" bash "$HERE/lib/clusterctl.sh" install "$CONF" "$REPO/slurm_hooks" || die "config install failed"
t "start daemons" bash "$HERE/lib/clusterctl.sh" start || die "cluster start failed"
echo "[timing] bringup-22.05 ($VARIANT) total: $((SECONDS-T0)) s" >&2
