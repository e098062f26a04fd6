#!/bin/bash
# One-time CI setup before pytest (run as root): host packages, the Slurm 22.05 test clusters
# ("gimbal" + the mps-only, GPU-type and accounting (slurmdbd + MariaDB) variants), the Slurm 26.05 chroot cluster with pyslurm, and a
# PostgreSQL server. Prints timings; exits non-zero if anything failed (logs are printed).
#
#   sudo bash tests/slurm/ci-setup.sh
#   then: GIMBAL_REQUIRE_SLURM=1 GIMBAL_REQUIRE_PG=1 python -m pytest ...
#
# SKIP_2605=1 skips the chroot (saves ~4-6 min on a fresh machine).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
T0=$SECONDS
LOGS=${GIMBAL_CI_LOGS:-/tmp/gimbal-ci-setup}
mkdir -p "$LOGS"
fail=0
step() { # step NAME CMD... : run, time, keep the log, report
  local name=$1 s=$SECONDS rc=0; shift
  "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  echo "[ci-setup] $name: rc=$rc, $((SECONDS-s)) s" >&2
  if [ $rc != 0 ]; then fail=1; echo "----- $LOGS/$name.log (tail) -----" >&2; tail -n 60 "$LOGS/$name.log" >&2; fi
  return $rc
}
[ "$(id -u)" = 0 ] || { echo "ci-setup: must run as root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

# 1. host packages in one apt run: Slurm 22.05 + munge, Lua 5.1 (job_submit.lua unit tests; the
#    interpreter Slurm links), debootstrap (26.05 chroot), PostgreSQL, util-linux + systemd
#    (unshare and systemd-analyze verify: tests/slurm/test_install_from_etc.py), MariaDB +
#    slurmdbd (the accounting cluster "gimbaldbd": sacct history for A-SRPT)
step apt bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends \
  munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins lua5.1 debootstrap postgresql \
  util-linux systemd mariadb-server slurmdbd' \
  || { echo "[ci-setup] FAILED (apt)" >&2; exit 1; }

# 2. the 26.05 chroot is the long pole: build it in the background
if [ "${SKIP_2605:-0}" != 1 ]; then
  s2605=$SECONDS
  FRESH=1 bash "$HERE/bringup-26.05.sh" >"$LOGS/bringup-26.05.log" 2>&1 &
  pid2605=$!
fi

# 3. 22.05 clusters and PostgreSQL meanwhile
step bringup-22.05 env FRESH=1 bash "$HERE/bringup-22.05.sh"
step bringup-22.05-mps env FRESH=1 VARIANT=mps bash "$HERE/bringup-22.05.sh"
step bringup-22.05-het env FRESH=1 VARIANT=het bash "$HERE/bringup-22.05.sh"
step bringup-22.05-dbd env FRESH=1 VARIANT=dbd bash "$HERE/bringup-22.05.sh"
step postgres bash "$REPO/tests/services/postgres.sh"
[ -f "$LOGS/postgres.log" ] && echo "[ci-setup] postgres URL: $(tail -1 "$LOGS/postgres.log")" >&2

if [ -n "${pid2605:-}" ]; then
  rc=0; wait "$pid2605" || rc=$?
  echo "[ci-setup] bringup-26.05: rc=$rc, $((SECONDS-s2605)) s" >&2
  grep '^\[timing\]' "$LOGS/bringup-26.05.log" >&2
  if [ $rc != 0 ]; then fail=1; tail -n 60 "$LOGS/bringup-26.05.log" >&2; fi
  # the GPU-type variant in the same chroot (seconds once the chroot exists)
  [ $rc = 0 ] && step bringup-26.05-het env FRESH=1 VARIANT=het bash "$HERE/bringup-26.05.sh"
fi
grep -h '^\[timing\]' "$LOGS/bringup-22.05.log" "$LOGS/bringup-22.05-mps.log" "$LOGS/bringup-22.05-dbd.log" >&2 2>/dev/null
echo "[ci-setup] total: $((SECONDS-T0)) s, $([ $fail = 0 ] && echo OK || echo FAILED)" >&2
exit $fail
