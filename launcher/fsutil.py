"""Atomic file replacement shared by checkpoints and decision files (no torch import)."""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator


@contextlib.contextmanager
def atomic_target(path: str, prefix: str) -> Iterator[str]:
    """Yield a temporary path next to ``path``.  When the block succeeds the file
    replaces ``path`` in one ``os.replace``; on any error it is removed and
    ``path`` is left as it was, so readers never see a partial file."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
