"""The daemon's directories, created on its first (non-dry) run with safe permissions.

=============================  ======  =====================================================
directory                      mode    why
=============================  ======  =====================================================
SQLite DB's directory          0750    the state store: only the daemon's user (and group)
                                       read it; the file itself gets the process umask
lock file's directory          0750    the per-cluster lock and its holder record
``state_dir``                  0755    shared with the training jobs (launcher decisions)
``state_dir/decisions``        0755    written by the daemon, read by each job
``state_dir/reports``          1733    each job appends its own ``<job>.jsonl``; sticky and
``state_dir/checkpoints``      1733    not listable, so users see and touch only their own
=============================  ======  =====================================================

Only missing directories are created, owned by the daemon's user; existing ones are left as
the administrator made them (a systemd ``StateDirectory=``, a package, a shared filesystem).
``gimbalctl daemon --dry-run`` creates nothing.
"""
from __future__ import annotations

import os
from typing import Optional

from .config import Config

DB_DIR_MODE = 0o750
LOCK_DIR_MODE = 0o750
SPOOL_MODES = {"": 0o755, "decisions": 0o755, "reports": 0o1733, "checkpoints": 0o1733}


class StateDirError(OSError):
    """A directory the daemon needs cannot be created (message names it)."""


def sqlite_file(db: Optional[str]) -> Optional[str]:
    """The file of a SQLite ``--db`` (path or ``sqlite:///`` URL); None for other databases
    and in-memory SQLite."""
    from .store.db import resolve_url
    url = resolve_url(db)
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    if path.startswith("file:"):
        path = path[5:]
    return path or None if path != ":memory:" else None


def _mkdir(path: str, mode: int, created: list[str]) -> None:
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent != path and not os.path.isdir(parent):
        _mkdir(parent, 0o755, created)
    try:
        os.mkdir(path)
        os.chmod(path, mode)  # mkdir's mode is cut by the umask; sticky needs chmod anyway
    except FileExistsError:
        if not os.path.isdir(path):
            raise StateDirError(f"{path} exists and is not a directory") from None
        return
    except OSError as e:
        raise StateDirError(f"cannot create {path}: {e.strerror or e}") from None
    created.append(f"{path} (mode {mode:04o})")


def prepare(cfg: Config) -> list[str]:
    """Create the missing directories of ``cfg``; returns what was created (for the log)."""
    from .lock import lock_path
    created: list[str] = []
    for sub, mode in SPOOL_MODES.items():
        _mkdir(os.path.join(cfg.state_dir, sub) if sub else cfg.state_dir, mode, created)
    _mkdir(os.path.dirname(os.path.abspath(lock_path(cfg.lock_path, "x"))), LOCK_DIR_MODE,
           created)
    db = sqlite_file(cfg.db)
    if db:
        _mkdir(os.path.dirname(os.path.abspath(db)), DB_DIR_MODE, created)
    return created
