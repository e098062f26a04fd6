#!/bin/bash
# gimbal test cluster control (runs on the host for 22.05, inside the sid chroot for 26.05).
#
#   clusterctl.sh install <conf-dir> <hooks-dir>   copy configs + gimbal hooks, dirs, fake GPUs
#   clusterctl.sh start                            munged, slurmctld, one slurmd per node; wait idle
#   clusterctl.sh stop                             scancel all, stop daemons by PID file
#   clusterctl.sh status                           exit 0 when slurmctld answers and nodes are idle
#
# A conf dir with a slurmdbd.conf (conf-22.05-dbd) also gets accounting: MariaDB (the host's
# server, started if it does not answer: unix socket only, --skip-networking), the database
# user and database slurmdbd.conf names, slurmdbd (reads slurmdbd.conf next to $SLURM_CONF),
# and the cluster, account "gimbal" and the test users in it (sacctmgr), before slurmctld.
#
# One script, several clusters side by side: INSTANCE=<x> (default "gimbal") uses /etc/slurm-<x>,
# /run/slurm-<x>, /var/spool/slurmctld-<x>, /var/spool/slurmd-<x>, /var/log/slurm-<x> (the conf
# dir's slurm.conf must name the same paths and its own ports), so it never touches a site's
# /etc/slurm. Clients need SLURM_CONF=/etc/slurm-<x>/slurm.conf. munged is shared (started only
# if munge does not work yet). FRESH=1 on start forgets saved jobs/node state.
# Never uses pkill/killall: daemons are stopped by their PID files only.
set -uo pipefail
INSTANCE=${INSTANCE:-gimbal}
[[ "$INSTANCE" =~ ^[a-z0-9-]+$ ]] || { echo "clusterctl: bad INSTANCE" >&2; exit 2; }
S="-$INSTANCE"
ETC=/etc/slurm$S
RUN=/run/slurm$S
SPOOL=/var/spool/slurmctld$S
DSPOOL=/var/spool/slurmd$S
LOGD=/var/log/slurm$S
FAKE=/var/lib/gimbal-test/fakegpu/$INSTANCE
export SLURM_CONF=$ETC/slurm.conf
die() { echo "clusterctl[$INSTANCE]: ERROR: $*" >&2; exit 1; }
log() { echo "clusterctl[$INSTANCE]: $*" >&2; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }
# nofds CMD...: exec CMD with no file descriptor above 2. A daemon started under
# `flock /tmp/gimbal-slurm-tests.lock ...` otherwise inherits the lock's descriptor and holds
# the machine-wide test lock for its whole life (seen with munged: every Slurm test waited)
nofds() { local fd; for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec "$@"; }
nodes() { sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$SLURM_CONF"; }
dump_logs() {
  echo "----- last lines of $LOGD/slurmctld.log -----" >&2; tail -n 25 $LOGD/slurmctld.log >&2 2>/dev/null
  for n in $(nodes); do echo "----- $LOGD/slurmd-$n.log -----" >&2; tail -n 10 $LOGD/slurmd-$n.log >&2 2>/dev/null; done
  sinfo -N -l >&2 2>/dev/null
}

do_install() {
  local src=$1 hooks=$2 H
  [ -f "$src/slurm.conf" ] || die "no slurm.conf in $src"
  H=$(hostname -s)
  # NoInAddrAny binds every daemon to the address the host name resolves to: keep it on loopback
  case "$(getent ahostsv4 "$H" | awk 'NR==1{print $1}')" in
    127.*) ;;
    *) echo "127.0.0.1 $H  # gimbal test cluster: slurm daemons on loopback" >> /etc/hosts ;;
  esac
  install -d -m 755 $ETC $ETC/gimbal
  # slurmctld refuses to run on a host not named in SlurmctldHost: template the short host name
  sed -e "s/@HOST@/$H/g" "$src/slurm.conf" > $ETC/slurm.conf.new && mv $ETC/slurm.conf.new $ETC/slurm.conf
  chmod 644 $ETC/slurm.conf
  install -m 644 "$src/gres.conf" $ETC/gres.conf
  [ -f "$src/cgroup.conf" ] && install -m 644 "$src/cgroup.conf" $ETC/cgroup.conf
  [ -f "$src/gimbal-hooks.conf" ] && install -m 644 "$src/gimbal-hooks.conf" $ETC/gimbal-hooks.conf
  if [ -f "$src/slurmdbd.conf" ]; then   # slurmdbd refuses a config others can read
    install -o slurm -g slurm -m 600 "$src/slurmdbd.conf" $ETC/slurmdbd.conf
  else
    rm -f $ETC/slurmdbd.conf
  fi
  # the project's own hooks (slurm_hooks/), not test doubles
  install -m 644 "$hooks/job_submit.lua" $ETC/job_submit.lua
  for f in prolog.sh epilog.sh task_prolog.sh; do install -m 755 "$hooks/$f" $ETC/gimbal/$f; done
  install -m 644 "$hooks/hooklib.sh" $ETC/gimbal/hooklib.sh
  id slurm >/dev/null 2>&1 || die "user slurm missing (is slurmctld installed?)"
  install -d -o slurm -g slurm -m 755 $SPOOL $LOGD $RUN
  install -d -m 755 $DSPOOL /var/log/gimbal /var/log/gimbal/hooks
  local n g cnt
  for n in $(nodes); do
    install -d -m 755 $DSPOOL/$n $FAKE/$n
    # fake GPUs: char devices with NVIDIA's major 195 (slurmd rejects regular files)
    cnt=$(sed -n "s/^NodeName=$n .*Gres=gpu:\([a-z0-9_]*:\)\{0,1\}\([0-9][0-9]*\).*/\2/p" $ETC/slurm.conf)
    for g in $(seq 0 $((${cnt:-0}-1))); do
      [ -c $FAKE/$n/nvidia$g ] || { rm -f $FAKE/$n/nvidia$g; mknod $FAKE/$n/nvidia$g c 195 $g; }
    done
  done
}

dbd_conf() { sed -n "s/^$1=//p" $ETC/slurmdbd.conf | head -1; }

start_dbd() {
  local db user pass
  db=$(dbd_conf StorageLoc); user=$(dbd_conf StorageUser); pass=$(dbd_conf StoragePass)
  [[ "$db$user$pass" =~ ^[A-Za-z0-9_]+$ ]] || die "slurmdbd.conf: StorageLoc/User/Pass must be [A-Za-z0-9_]"
  command -v mariadbd >/dev/null && command -v /usr/sbin/slurmdbd >/dev/null \
    || die "mariadb-server / slurmdbd not installed"
  if ! mariadb -e 'select 1' >/dev/null 2>&1; then
    install -d -o mysql -g mysql -m 755 /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
      >$LOGD/mariadb-install.log 2>&1 || die "mariadb-install-db failed (see $LOGD/mariadb-install.log)"
    rm -f /run/mysqld/mysqld.pid
    ( nofds runuser -u mysql -- /usr/sbin/mariadbd --skip-networking --socket=/run/mysqld/mysqld.sock \
      --pid-file=/run/mysqld/mysqld.pid --datadir=/var/lib/mysql ) </dev/null >>$LOGD/mariadb.log 2>&1 &
    for i in $(seq 150); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
    mariadb -e 'select 1' >/dev/null 2>&1 || { tail -n 20 $LOGD/mariadb.log >&2; die "MariaDB does not answer"; }
  fi
  mariadb -e "CREATE USER IF NOT EXISTS '$user'@'localhost' IDENTIFIED BY '$pass';
              GRANT ALL ON $db.* TO '$user'@'localhost'; FLUSH PRIVILEGES;" \
    || die "cannot create the slurmdbd database user"
  if ! alive $RUN/slurmdbd.pid; then
    rm -f $RUN/slurmdbd.pid
    ( nofds /usr/sbin/slurmdbd ) || { tail -n 20 $LOGD/slurmdbd.log >&2; die "slurmdbd failed to start"; }
  fi
  local deadline=$((SECONDS+60))
  until sacctmgr -n show cluster >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { tail -n 20 $LOGD/slurmdbd.log >&2; die "slurmdbd not answering after 60 s"; }
    sleep 0.3
  done
  local cl
  cl=$(sed -n 's/^ClusterName=//p' $SLURM_CONF)
  sacctmgr -n -P show cluster format=cluster | grep -qx "$cl" || sacctmgr -i add cluster "$cl" >/dev/null
  sacctmgr -n -P show account format=account | grep -qx gimbal \
    || sacctmgr -i add account gimbal Description=gimbal-tests Organization=gimbal >/dev/null
  local u
  for u in root alice bob mallory; do
    id "$u" >/dev/null 2>&1 || continue
    sacctmgr -n -P show assoc cluster="$cl" user="$u" format=user | grep -qx "$u" \
      || sacctmgr -i add user "$u" Account=gimbal Cluster="$cl" >/dev/null
  done
  log "slurmdbd up ($(dbd_conf DbdAddr):$(dbd_conf DbdPort), database $db)"
}

do_start() {
  [ -f "$SLURM_CONF" ] || die "$SLURM_CONF missing: run install first"
  install -d -o munge -g munge -m 755 /run/munge
  install -d -o slurm -g slurm -m 755 $RUN
  if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key missing"
    rm -f /run/munge/munged.pid
    ( nofds runuser -u munge -- /usr/sbin/munged ) || die "munged failed to start"   # refuses to run as root
    for i in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null | unmunge >/dev/null 2>&1 || die "munge does not work"
  fi
  [ -f $ETC/slurmdbd.conf ] && start_dbd
  if ! alive $RUN/slurmctld.pid; then
    if [ "${FRESH:-0}" = 1 ]; then find $SPOOL -mindepth 1 ! -name '*.key' -delete; fi
    rm -f $RUN/slurmctld.pid   # a stale file would look like an instant crash below
    ( nofds /usr/sbin/slurmctld -f $SLURM_CONF ) || { dump_logs; die "slurmctld failed to start"; }
  fi
  local deadline=$((SECONDS+30))
  until scontrol ping 2>/dev/null | grep -q 'is UP'; do
    # the daemonized slurmctld writes its PID file a moment after the parent exits
    if [ -f $RUN/slurmctld.pid ] && ! alive $RUN/slurmctld.pid; then dump_logs; die "slurmctld died"; fi
    [ $SECONDS -lt $deadline ] || { dump_logs; die "slurmctld not answering after 30 s"; }
    sleep 0.2
  done
  local n
  for n in $(nodes); do
    alive $RUN/slurmd-$n.pid || ( nofds /usr/sbin/slurmd -f $SLURM_CONF -N "$n" ) || { dump_logs; die "slurmd $n failed"; }
  done
  local want resumed=0 part
  want=$(nodes | wc -l)
  part=$(sed -n 's/^PartitionName=\([^ ]*\) .*Default=YES.*/\1/p' $SLURM_CONF | head -1)
  deadline=$((SECONDS+60))
  until [ "$(sinfo -h -N -p "$part" -o '%t' 2>/dev/null | grep -c -E '^(idle|mix|alloc)-?$')" -ge "$want" ]; do
    [ $SECONDS -lt $deadline ] || { dump_logs; die "nodes not idle after 60 s"; }
    sleep 0.3
    # a node drained in an earlier run (e.g. after a GRES config change) stays drained: resume once
    if [ $resumed = 0 ] && [ $SECONDS -gt $((deadline-55)) ]; then
      for n in $(sinfo -h -N -p "$part" -t drain,drng,down -o '%N'); do scontrol update nodename=$n state=resume 2>/dev/null; done
      resumed=1
    fi
  done
  log "up: $(sinfo -h -N -p "$part" -o '%N=%t' | tr '\n' ' ')"
}

do_stop() {
  if [ -f "$SLURM_CONF" ] && scontrol ping 2>/dev/null | grep -q 'is UP'; then
    # stopping slurmd leaves running jobs' slurmstepd behind: cancel every job first
    scancel $(squeue -h -o %i 2>/dev/null) 2>/dev/null
    for i in $(seq 75); do [ -z "$(squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  local f p
  for f in $RUN/slurmd-*.pid $RUN/slurmctld.pid $RUN/slurmdbd.pid; do
    [ -f "$f" ] || continue; p=$(cat "$f")
    kill "$p" 2>/dev/null && log "stopped $(basename $f .pid) ($p)"
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  done
  # munged is shared by all instances on this host/chroot: stop it only when asked
  if [ "${STOP_MUNGE:-0}" = 1 ] && alive /run/munge/munged.pid; then
    kill "$(cat /run/munge/munged.pid)" && log "stopped munged"
  fi
}

do_status() {
  scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
  local want part
  want=$(nodes | wc -l)
  part=$(sed -n 's/^PartitionName=\([^ ]*\) .*Default=YES.*/\1/p' $SLURM_CONF | head -1)
  [ "$(sinfo -h -N -p "$part" -o '%t' 2>/dev/null | grep -c -E '^(idle|mix|alloc)-?$')" -ge "$want" ]
}

case "${1:-}" in
  install) shift; do_install "$@" ;;
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  *) echo "usage: $0 install <conf-dir> <hooks-dir> | start | stop | status" >&2; exit 2 ;;
esac
