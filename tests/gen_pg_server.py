"""Test helper: a PostgreSQL server for the portability tests.

``$PROFDB_TEST_POSTGRES_URL`` (e.g. ``postgresql+psycopg://user:pw@127.0.0.1/db``) wins. Otherwise, when
PostgreSQL's server binaries are installed (CI installs them), a throwaway cluster is started in a
temporary folder, listening on a Unix socket only (no TCP), as the ``postgres`` user when the tests run
as root (initdb refuses root), and stopped at the end. Without either, the tests that need it skip."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ENV_URL = "PROFDB_TEST_POSTGRES_URL"


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


@contextmanager
def postgres_url() -> Iterator[str | None]:
    """Yields an SQLAlchemy URL of an empty-able database, or None when no server can be had."""
    env = os.environ.get(ENV_URL)
    if env:
        yield env
        return
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        yield None
        return
    as_root = os.geteuid() == 0
    prefix: list[str] = []
    if as_root:
        runuser = shutil.which("runuser")
        if runuser is None:
            yield None
            return
        prefix = [runuser, "-u", "postgres", "--"]
    tmp = Path(tempfile.mkdtemp(prefix="profdb-pg-"))
    data, sock = tmp / "data", tmp / "sock"
    sock.mkdir()
    if as_root:
        shutil.chown(tmp, "postgres")
        shutil.chown(sock, "postgres")
    user = "postgres" if as_root else os.environ.get("USER", "postgres")
    started = False
    try:
        subprocess.run(
            prefix + [initdb, "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
        )
        opts = f"-c listen_addresses='' -c unix_socket_directories={sock} -c fsync=off -c full_page_writes=off"
        subprocess.run(
            prefix + [pg_ctl, "-D", str(data), "-o", opts, "-l", str(tmp / "log"), "-w", "start"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        started = True
        yield f"postgresql+psycopg://{user}@/postgres?host={sock}"
    except (subprocess.SubprocessError, OSError):
        if not started:
            yield None
        else:
            raise
    finally:
        if started:
            subprocess.run(prefix + [pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
