"""An admin's install from the packaged files alone (issue #14, acceptance; items 7 and 8).

In a private mount namespace whose ``/etc``, ``/var``, ``/run`` and ``/usr/local`` are
overlays on a scratch directory (so nothing of it reaches the host; munge's socket is bound
back in), this test

1. runs the install commands of docs/slurm.md ("Deploying", step 4) as they are written,
   except the two steps this machine cannot do for real: installing the software (pip) is a
   ``/usr/local/bin/gimbalctl`` shim that runs this checkout, and ``systemctl`` is replaced by
   ``systemd-analyze verify`` of the installed units and by running the service's
   ``ExecStart`` the way systemd would (root, a clean environment with systemd's PATH) -
   without creating ``StateDirectory``/``RuntimeDirectory`` first, as cron would;
2. points the host's default Slurm client config (``/etc/slurm/slurm.conf``) at the 22.05
   test cluster, as on a real cluster host;
3. checks that one cycle ran (ordering the real queue by the chosen policy), that the state
   directories were created with the documented modes, and that ``gimbalctl queue``,
   ``explain`` and ``cycles`` with no ``--config`` read ``/etc/gimbal/gimbal.toml`` and the
   daemon's store.

The only edit to the packaged config is the policy name (the ``sed`` line of the docs).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_ordering import fill_cluster, pending_by_priority

pytestmark = pytest.mark.slurm

SKIP_STEPS = ("python3 -m venv", "pip install", "ln -sf /opt/gimbal", "systemctl ")


def doc_install_lines() -> list[str]:
    text = (REPO / "docs" / "slurm.md").read_text()
    block = text.split("<!-- install-daemon", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [l.strip() for l in block.splitlines() if l.strip()]


NS_SCRIPT = r"""
set -eu
S="$SCRATCH"
for d in etc var usr-local run; do mkdir -p "$S/$d.up" "$S/$d.work"; done
mkdir -p "$S/realrun"
mount --bind /run "$S/realrun"
mount -t overlay overlay -o lowerdir=/etc,upperdir="$S/etc.up",workdir="$S/etc.work" /etc
mount -t overlay overlay -o lowerdir=/var,upperdir="$S/var.up",workdir="$S/var.work" /var
mount -t overlay overlay -o lowerdir=/run,upperdir="$S/run.up",workdir="$S/run.work" /run
mount --bind "$S/realrun/munge" /run/munge
mkdir -p /usr/local
mount -t overlay overlay -o lowerdir=/usr/local,upperdir="$S/usr-local.up",workdir="$S/usr-local.work" /usr/local
# a fresh machine: none of gimbal's paths exist
rm -rf /etc/gimbal /var/lib/gimbal /var/spool/gimbal /run/gimbal /etc/systemd/system/gimbal-*
# "pip install": a shim running this checkout
mkdir -p /usr/local/bin
printf '#!/bin/sh\nPYTHONPATH=%s exec %s -m gimbalctl.cli "$@"\n' "$REPO" "$PYBIN" > /usr/local/bin/gimbalctl
chmod 755 /usr/local/bin/gimbalctl
# this host's default Slurm client config is the test cluster's
mkdir -p /etc/slurm && ln -sf "$SLURM_TEST_CONF" /etc/slurm/slurm.conf
cd "$REPO"
bash -eu "$S/install.sh"
systemd-analyze verify /etc/systemd/system/gimbal-daemon.service /etc/systemd/system/gimbal-daemon.timer \
    > "$S/out/verify.txt" 2>&1 || echo "verify rc=$?" >> "$S/out/verify.txt"
cp /etc/gimbal/gimbal.toml "$S/out/gimbal.toml"
EXEC=$(sed -n 's/^ExecStart=//p' /etc/systemd/system/gimbal-daemon.service)
cd /
set +e
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin $EXEC \
    > "$S/out/cycle.out" 2> "$S/out/cycle.err"
echo $? > "$S/out/cycle.rc"
stat -c '%a %U %n' /var/lib/gimbal /run/gimbal /var/spool/gimbal /var/spool/gimbal/decisions \
    /var/spool/gimbal/reports /var/spool/gimbal/checkpoints /var/lib/gimbal/gimbal.db \
    > "$S/out/stat.txt" 2>&1
ls /run/gimbal > "$S/out/run.txt" 2>&1
E="env -i PATH=/usr/local/bin:/usr/bin:/bin"
$E gimbalctl queue --json > "$S/out/queue.json" 2> "$S/out/queue.err"
$E gimbalctl explain "$FIRST_JOB" --json > "$S/out/explain.json" 2> "$S/out/explain.err"
$E gimbalctl cycles --json > "$S/out/cycles.json" 2> "$S/out/cycles.err"
$E gimbalctl audit --json > "$S/out/audit.json" 2> "$S/out/audit.err"
exit 0
"""


def test_install_from_packaged_etc_files_runs_a_cycle(slurm_2205, clean_slurm, tmp_path):
    if shutil.which("unshare") is None or shutil.which("systemd-analyze") is None:
        pytest.fail("this test needs unshare(1) and systemd-analyze (util-linux, systemd)")
    c = slurm_2205
    lines = doc_install_lines()
    run = [l for l in lines if not l.startswith(SKIP_STEPS) and " pip " not in l]
    skipped = [l for l in lines if l not in run]
    # the documented steps this test emulates, and nothing else
    assert [s.split()[0] for s in skipped] == ["python3", "ln", "systemctl", "systemctl"], skipped
    assert any(l.startswith("install -D -m 0644 etc/gimbal.toml /etc/gimbal/gimbal.toml")
               for l in run)
    edits = [l for l in run if "/etc/gimbal/gimbal.toml" in l and not l.startswith("install")]
    assert len(edits) == 1 and edits[0].startswith("sed -i 's/^policy = .*/policy = \"sjf\"/'")
    (tmp_path / "install.sh").write_text("\n".join(run) + "\n")
    (tmp_path / "out").mkdir()

    fill_cluster(c)
    limits = [30, 10, 20]
    jobs = [str(c.submit(["--gres=gpu:4", "-t", str(t)])) for t in limits]
    sjf = [j for _, j in sorted(zip(limits, jobs))]
    env = dict(os.environ, SCRATCH=str(tmp_path), REPO=str(REPO), PYBIN=sys.executable,
               SLURM_TEST_CONF=c.slurm_conf, FIRST_JOB=sjf[0])
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                        NS_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    out = tmp_path / "out"
    rd = lambda n: (out / n).read_text()  # noqa: E731

    # the packaged config, changed only in the policy line
    shipped = (REPO / "etc" / "gimbal.toml").read_text().splitlines()
    installed = rd("gimbal.toml").splitlines()
    diff = [(a, b) for a, b in zip(shipped, installed) if a != b]
    assert len(shipped) == len(installed) and len(diff) == 1, diff
    assert diff[0][0].startswith("policy = ") and diff[0][1] == 'policy = "sjf"'
    # the units pass systemd's own check
    assert "verify rc" not in rd("verify.txt"), rd("verify.txt")

    # one cycle ran and ordered the real queue by sjf
    assert rd("cycle.rc").strip() == "0", rd("cycle.err")
    assert re.match(r"cycle 1: policy sjf, mode ordering/priority, backend cli \(Slurm 22\.05\)",
                    rd("cycle.out")), rd("cycle.out")
    assert pending_by_priority(c)[0] == sjf
    # directories created on the first run, with the documented modes, owned by the daemon's user
    modes = {l.split()[2]: (l.split()[0], l.split()[1]) for l in rd("stat.txt").splitlines()}
    assert modes == {"/var/lib/gimbal": ("750", "root"), "/run/gimbal": ("750", "root"),
                     "/var/spool/gimbal": ("755", "root"),
                     "/var/spool/gimbal/decisions": ("755", "root"),
                     "/var/spool/gimbal/reports": ("1733", "root"),
                     "/var/spool/gimbal/checkpoints": ("1733", "root"),
                     "/var/lib/gimbal/gimbal.db": (modes["/var/lib/gimbal/gimbal.db"][0], "root")}, \
        rd("stat.txt")
    for d in ("/var/lib/gimbal", "/run/gimbal", "/var/spool/gimbal/reports"):
        assert f"created {d} (mode" in rd("cycle.err")
    assert "daemon-gimbal.lock" in rd("run.txt").split()

    # read-only commands without --config use /etc/gimbal/gimbal.toml and the daemon's store
    q = json.loads(rd("queue.json"))
    assert q["source"].startswith("cycle 1, policy sjf"), q
    assert [r["job_id"] for r in q["jobs"]] == sjf and q["warnings"] == []
    e = json.loads(rd("explain.json"))
    assert (e["policy"], e["position"], e["source"][:7]) == ("sjf", 0, "cycle 1"), e
    assert [(x["id"], x["status"], x["policy"]) for x in json.loads(rd("cycles.json"))["cycles"]] \
        == [(1, "done", "sjf")]
    assert sorted(x["job_id"] for x in json.loads(rd("audit.json"))["changes"]) == sorted(jobs)
    # nothing reached the host
    for path in ("/etc/gimbal", "/var/lib/gimbal", "/var/spool/gimbal", "/run/gimbal",
                 "/etc/systemd/system/gimbal-daemon.service"):
        assert not Path(path).exists(), path
