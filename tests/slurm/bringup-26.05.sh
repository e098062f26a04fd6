#!/bin/bash
# Bring up the gimbal test cluster on Slurm 26.05 (Debian sid) in a debootstrap chroot, with
# pyslurm 25.11.2 built from the PyPI sdist against it and a venv that has gimbal's deps.
# Idempotent: the chroot, packages and venv are reused; daemons already running are kept.
#
#   sudo bash tests/slurm/bringup-26.05.sh            # build (first time ~4-6 min) + start
#   FRESH=1 ...                                       # forget saved jobs / node state
#   BUILD_ONLY=1 ...                                  # chroot + venv only, start nothing
#   GIMBAL_SID_ROOT=/var/lib/gimbal-test/sid          # chroot location (default)
#   VARIANT=het ...                                   # cluster "gimbal26het" in the same chroot:
#                                                     # h1 (gpu:k80:2), h2 (gpu:v100:2), port 6947,
#                                                     # SLURM_CONF=/etc/slurm-gimbal-het/slurm.conf
#   bash tests/slurm/bringup-26.05.sh stop            # stop the chroot's daemons, unmount
#
# Runs alongside the 22.05 cluster: slurmctld 6917, slurmd 6918 + 17101-17104, own munged,
# /etc and /run inside the chroot. Run commands in it with tests/slurm/in-chroot.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
R=${GIMBAL_SID_ROOT:-/var/lib/gimbal-test/sid}
VARIANT=${VARIANT:-main}
case "$VARIANT" in
  main) CONFSRC=conf-26.05; INSTANCE=gimbal ;;
  het)  CONFSRC=conf-26.05-het; INSTANCE=gimbal-het ;;
  *) echo "bringup-26.05: unknown VARIANT=$VARIANT (main|het)" >&2; exit 2 ;;
esac
VENV=/opt/gimbal-venv
PYSLURM_VERSION=25.11.2
PY_DEPS="click numpy pandas scipy SQLAlchemy alembic filelock rich matplotlib scikit-learn pytest hypothesis setuptools wheel"
export DEBIAN_FRONTEND=noninteractive
T0=$SECONDS
# t LABEL CMD...: run CMD, print how long it took
t() { local l=$1 s=$SECONDS rc=0; shift; "$@" || rc=$?; echo "[timing] 26.05 $l: $((SECONDS-s)) s" >&2; return $rc; }
die() { echo "bringup-26.05: ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, mounts)"
C=(chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 SLURM_CONF=/etc/slurm-$INSTANCE/slurm.conf
   INSTANCE=$INSTANCE DEBIAN_FRONTEND=noninteractive)

mount_all() {
  # bind mounts whose source directory was deleted (old checkouts, e.g. an earlier CI run at the
  # same path) are dropped: in-chroot.sh would otherwise cd into a dead directory
  { awk -v r="$R/" '$4 ~ /\/\/deleted$/ && index($5, r) == 1 {print $5}' /proc/self/mountinfo || true; } \
    | sort -r | while read -r m; do umount -l "$m" || true; done
  mountpoint -q "$R/proc"    || mount -t proc proc "$R/proc"
  mountpoint -q "$R/dev"     || mount --bind /dev "$R/dev"
  mountpoint -q "$R/dev/pts" || mount --bind /dev/pts "$R/dev/pts"
}
if [ "${1:-}" = stop ]; then
  [ -d "$R/opt/gimbal-test" ] || exit 0
  mount_all
  if [ "$VARIANT" != main ]; then   # the variant only: munged and the mounts serve "gimbal26" too
    "${C[@]}" bash /opt/gimbal-test/clusterctl.sh stop || true
    exit 0
  fi
  "${C[@]}" env STOP_MUNGE=1 bash /opt/gimbal-test/clusterctl.sh stop || true
  # unmount what bringup/in-chroot.sh mounted; a process still inside keeps a mount busy
  for m in "$REPO" /dev/pts /dev /proc; do
    if mountpoint -q "$R$m"; then umount "$R$m" || echo "bringup-26.05: $R$m busy, left mounted" >&2; fi
  done
  exit 0
fi

# 1. the chroot itself (debootstrap minbase, ~40 s)
command -v debootstrap >/dev/null || t "apt install debootstrap" apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
if [ ! -x "$R/usr/bin/apt-get" ] || [ ! -f "$R/.gimbal-base-ok" ]; then
  MIRROR=${GIMBAL_DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
  [ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  # never delete through a bind mount (in-chroot.sh binds the repo inside): unmount first
  { grep -o " $R[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount "$m" || umount -l "$m"; done
  if grep -q " $R" /proc/mounts; then die "$R still has mounts inside; not deleting it"; fi
  rm -rf "$R"; mkdir -p "$R"
  t debootstrap debootstrap --variant=minbase --include=ca-certificates sid "$R" "$MIRROR" >/dev/null \
    || die "debootstrap failed (see $R/debootstrap/debootstrap.log)"
  touch "$R/.gimbal-base-ok"
fi
cp /etc/hosts /etc/resolv.conf "$R/etc/"
printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod +x "$R/usr/sbin/policy-rc.d"
# a snapshot mirror's sid Release file can be past its Valid-Until date
echo 'Acquire::Check-Valid-Until "false";' > "$R/etc/apt/apt.conf.d/99gimbal-no-valid-until"
# pip in the chroot must trust the same CAs as the host (TLS may be intercepted)
cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/host-ca-bundle.crt"
mount_all

# 2. Slurm 26.05 + build tools (~30 s)
PKGS="munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins libslurm-dev python3 python3-dev
      python3-venv gcc libc6-dev procps iproute2"
if [ ! -f "$R/.gimbal-pkgs-ok" ] || [ "$(cat "$R/.gimbal-pkgs-ok")" != "$(echo $PKGS)" ]; then
  t "apt-get update" "${C[@]}" apt-get update -qq
  t "apt-get install" "${C[@]}" apt-get install -y -qq --no-install-recommends $PKGS >/dev/null || die "apt-get install in the chroot failed"
  "${C[@]}" apt-get clean
  echo $PKGS > "$R/.gimbal-pkgs-ok"
fi
"${C[@]}" id alice >/dev/null 2>&1 || "${C[@]}" useradd -m -s /bin/bash alice   # unprivileged test user

# 3. configs + the repo's hooks (before the venv: importing pyslurm reads slurm.conf)
mkdir -p "$R/opt/gimbal-test"; rm -rf "$R/opt/gimbal-test/conf-$INSTANCE" "$R/opt/gimbal-test/hooks-$INSTANCE"
cp -r "$HERE/$CONFSRC" "$R/opt/gimbal-test/conf-$INSTANCE"; cp -r "$REPO/slurm_hooks" "$R/opt/gimbal-test/hooks-$INSTANCE"
install -m 755 "$HERE/lib/clusterctl.sh" "$R/opt/gimbal-test/clusterctl.sh"
t "install configs" "${C[@]}" bash /opt/gimbal-test/clusterctl.sh install /opt/gimbal-test/conf-$INSTANCE /opt/gimbal-test/hooks-$INSTANCE
# 4. venv with pyslurm (built against 26.05 through a header shim) + gimbal's deps
PIPENV=(env PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180)
[ -x "$R$VENV/bin/python" ] || t venv "${C[@]}" python3 -m venv $VENV
if ! "${C[@]}" $VENV/bin/python -c "import pyslurm, sys; sys.exit(pyslurm.version.__version__ != '$PYSLURM_VERSION')" 2>/dev/null; then
  # pyslurm's setup.py insists on Slurm 25.11 and no Debian suite ships it. The shim is a copy of
  # the 26.05 headers whose slurm_version.h gets an extra, preprocessor-dead 25.11 define at the
  # end: setup.py reads the last one as text, the compiler keeps the real 26.05 number.
  "${C[@]}" bash -c 'set -e; S=/opt/slurm-shim/include/slurm; rm -rf $S; mkdir -p $S
    for h in /usr/include/slurm/*.h; do ln -s "$h" "$S/$(basename "$h")"; done
    rm $S/slurm_version.h; cp /usr/include/slurm/slurm_version.h $S/
    printf "#if 0 /* text-only marker for the pyslurm 25.11 setup.py version check */\n#define SLURM_VERSION_NUMBER 0x190b00\n#endif\n" >> $S/slurm_version.h'
  # three API renames between 25.11 and 26.05, mapped with -D (see docs/slurm.md)
  t "pyslurm build" "${C[@]}" "${PIPENV[@]}" SLURM_INCLUDE_DIR=/opt/slurm-shim/include SLURM_LIB_DIR=/usr/lib/x86_64-linux-gnu \
    PYSLURM_BUILD_JOBS=$(nproc) \
    CFLAGS="-DSLURM_BACKWARD_COMPAT -Dslurm_free_ctl_conf=slurm_free_conf -DESLURM_ERROR_ON_DESC_TO_RECORD_COPY=ESLURM_MAX_JOB_COUNT" \
    $VENV/bin/pip install -q --no-binary pyslurm "pyslurm==$PYSLURM_VERSION" || die "pyslurm build failed"
fi
if [ "$(cat "$R$VENV/.gimbal-deps-ok" 2>/dev/null)" != "$PY_DEPS" ]; then
  t "pip install deps" "${C[@]}" "${PIPENV[@]}" $VENV/bin/pip install -q $PY_DEPS || die "pip install of gimbal deps failed"
  echo "$PY_DEPS" > "$R$VENV/.gimbal-deps-ok"
fi
if [ "${BUILD_ONLY:-0}" = 1 ]; then
  "${C[@]}" $VENV/bin/python -c 'import pyslurm, numpy, pandas, sqlalchemy; print("pyslurm", pyslurm.version.__version__)' \
    || die "venv incomplete"
  echo "[timing] bringup-26.05 (build only) total: $((SECONDS-T0)) s" >&2; exit 0
fi
# 5. daemons (~1 s)
t "start daemons" "${C[@]}" env FRESH="${FRESH:-0}" bash /opt/gimbal-test/clusterctl.sh start

# gimbal itself: the repo is bind-mounted at the same path by in-chroot.sh and put on PYTHONPATH
# there; an editable install also gives the console scripts (best effort: needs setup.cfg to build)
if ! bash "$HERE/in-chroot.sh" $VENV/bin/pip install -q --no-deps --no-build-isolation -e "$REPO" >/tmp/gimbal-chroot-editable.log 2>&1; then
  echo "bringup-26.05: note: editable install of $REPO failed (PYTHONPATH is used instead): $(tail -1 /tmp/gimbal-chroot-editable.log)" >&2
fi
"${C[@]}" $VENV/bin/python -c 'import pyslurm; print("pyslurm", pyslurm.version.__version__, "jobs:", len(pyslurm.Jobs.load()))' \
  || die "pyslurm does not import / talk to slurmctld"
echo "[timing] bringup-26.05 total: $((SECONDS-T0)) s" >&2
