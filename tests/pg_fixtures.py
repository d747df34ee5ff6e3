"""Store URLs for tests on both backends: an SQLite temp file, and a real PostgreSQL server.

The PostgreSQL server is the one in $PROFDB_TEST_PG_URL (a role allowed to CREATE DATABASE), or a
throwaway one this test session starts itself (``initdb`` + ``pg_ctl start`` in a temp folder, on a
free loopback port, as the ``postgres`` user when the tests run as root, since postgres refuses
root). Every test gets a fresh database, dropped afterwards. Where no server can be had, the
PostgreSQL cases are skipped with the reason (shown by ``pytest -ra``); .ci/install.d/postgresql.sh
installs the server so CI never skips.

Import the fixtures into a conftest with ``from pg_fixtures import *``. ``PgServer`` is also used
by benchmarks/pg_ingest.py."""

from __future__ import annotations

import atexit
import csv
import random
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import create_engine, text

__all__ = ["PgServer", "PgUnavailable", "pg_server", "pg_url", "store_url", "BACKENDS", "write_rocprof_run"]

BACKENDS = ("sqlite", "postgresql")
ENV_URL = "PROFDB_TEST_PG_URL"
_counter = itertools.count()


class PgUnavailable(Exception):
    """No PostgreSQL server can be started or reached here; the message says why."""


def find_bindir() -> Path | None:
    """Folder holding initdb, pg_ctl and postgres: $PG_BINDIR, pg_config --bindir, Debian's layout, PATH."""
    candidates: list[str] = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(os.environ["PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(os.path.realpath(initdb)).parent))
    for c in candidates:
        if c and all((Path(c) / b).is_file() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """A PostgreSQL server to create throwaway databases in: started here (``start()``) or external."""

    def __init__(self, admin_url: str, *, datadir: Path | None = None, bindir: Path | None = None,
                 run_as: str | None = None) -> None:
        self.admin_url = admin_url  # postgresql+psycopg://user@host:port/db of a role that may CREATE DATABASE
        self.datadir = datadir
        self.bindir = bindir
        self.run_as = run_as

    # ------------------------------------------------------------------ a server of our own
    @classmethod
    def start(cls) -> "PgServer":
        bindir = find_bindir()
        if bindir is None:
            raise PgUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found; install them "
                "(bash .ci/install.d/postgresql.sh) or set PROFDB_TEST_PG_URL"
            )
        run_as: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise PgUnavailable(
                    "tests run as root, and PostgreSQL refuses root, but there is no 'postgres' user to run it as; "
                    "install the postgresql package (it creates one) or set PROFDB_TEST_PG_URL"
                ) from None
            if not shutil.which("runuser"):
                raise PgUnavailable("tests run as root and `runuser` is missing to start PostgreSQL as 'postgres'")
            run_as = "postgres"
        base = Path(tempfile.mkdtemp(prefix="profdb-pg-"))
        datadir = base / "data"
        if run_as:
            pw = pwd.getpwnam(run_as)
            os.chown(base, pw.pw_uid, pw.pw_gid)
        os.chmod(base, 0o700)
        server = cls("", datadir=datadir, bindir=bindir, run_as=run_as)
        try:
            server._run("initdb", "-D", str(datadir), "-U", "profdb", "--auth=trust", "-E", "UTF8",
                        "--locale=C", "--no-sync", "--no-instructions")
            port = server._start_on_free_port(base)
        except BaseException:
            server._remove(base)
            raise
        server.admin_url = f"postgresql+psycopg://profdb@127.0.0.1:{port}/postgres"
        atexit.register(server.stop)
        return server

    def _cmd(self, prog: str, *args: str) -> list[str]:
        assert self.bindir is not None
        cmd = [str(self.bindir / prog), *args]
        return ["runuser", "-u", self.run_as, "--", *cmd] if self.run_as else cmd

    def _run(self, prog: str, *args: str) -> None:
        try:
            r = subprocess.run(self._cmd(prog, *args), capture_output=True, text=True, timeout=120, cwd="/")
        except (OSError, subprocess.SubprocessError) as e:
            raise PgUnavailable(f"{prog} failed to run: {e}") from e
        if r.returncode != 0:
            raise PgUnavailable(f"{prog} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-600:]}")

    def _start_on_free_port(self, base: Path) -> int:
        assert self.datadir is not None
        last = ""
        for _ in range(3):  # another process may take the port between probing and binding
            port = _free_port()
            opts = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
                    "-c full_page_writes=off -c max_connections=60 -c shared_buffers=64MB")
            try:
                self._run("pg_ctl", "-D", str(self.datadir), "-l", str(base / "server.log"), "-w", "-t", "60",
                          "-o", opts, "start")
                return port
            except PgUnavailable as e:
                last = str(e)
                try:
                    last += " " + (base / "server.log").read_text()[-600:]
                except OSError:
                    pass
        raise PgUnavailable(f"could not start a PostgreSQL server: {last}")

    def stop(self) -> None:
        if self.datadir is None or not self.datadir.exists():
            return
        try:
            subprocess.run(self._cmd("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop"),
                           capture_output=True, timeout=60, cwd="/")
        except (OSError, subprocess.SubprocessError):
            pass
        self._remove(self.datadir.parent)
        self.datadir = None

    @staticmethod
    def _remove(base: Path) -> None:
        shutil.rmtree(base, ignore_errors=True)

    # ------------------------------------------------------------------ databases
    def _admin(self) -> "object":
        import psycopg
        from sqlalchemy.engine import make_url

        u = make_url(self.admin_url)
        return psycopg.connect(
            host=u.host or None, port=u.port, user=u.username, password=u.password, dbname=u.database or "postgres",
            autocommit=True, connect_timeout=10,
        )

    def check(self) -> None:
        try:
            with self._admin() as conn:  # type: ignore[attr-defined]
                conn.execute("select 1")
        except Exception as e:
            raise PgUnavailable(f"cannot connect to PostgreSQL at {self.safe_url()}: {e}") from e

    def safe_url(self, db: str | None = None) -> str:
        from sqlalchemy.engine import make_url

        u = make_url(self.admin_url)
        if db is not None:
            u = u.set(database=db)
        return u.render_as_string(hide_password=True)

    def url(self, db: str) -> str:
        from sqlalchemy.engine import make_url

        return make_url(self.admin_url).set(database=db).render_as_string(hide_password=False)

    def create_database(self, prefix: str = "profdb_test") -> tuple[str, str]:
        """(name, URL) of a new empty database."""
        name = f"{prefix}_{os.getpid()}_{next(_counter)}_{int(time.time() * 1000) % 100000}"
        with self._admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, self.url(name)

    def drop_database(self, name: str) -> None:
        with self._admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def get_server() -> PgServer:
    """The server to test against: $PROFDB_TEST_PG_URL, else one started here. Raises PgUnavailable."""
    url = os.environ.get(ENV_URL)
    if url:
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            url = "postgresql+psycopg://" + url.split("://", 1)[1]
        server = PgServer(url)
        server.check()
        return server
    return PgServer.start()


# ---------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        server = get_server()
    except PgUnavailable as e:
        pytest.skip(f"PostgreSQL unavailable: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database (dropped after the test)."""
    name, url = pg_server.create_database()
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store on each backend: ``sqlite:///<tmp>/profdb.db`` and a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'profdb.db'}"
    return str(request.getfixturevalue("pg_url"))


# ---------------------------------------------------------------------- generated input


KERNEL_HEADER = [
    "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
    "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
    "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
    "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
]
COUNTER_HEADER = [
    "Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id", "Grid_Size", "Kernel_Id",
    "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count",
    "SGPR_Count", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp",
]


def kernel_names(n: int) -> list[str]:
    """Realistic kernel names (C++ templates with commas, an NCCL collective, non-ASCII), and one with
    tabs and a backslash so that text COPY escaping is exercised."""
    names = [f"void gemm_kernel<float, {i}>(float const*, float*, int, int)" for i in range(n - 3)]
    names += ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
              "odd\tname with\\backslash\tand tab", "café_kernel_µs"]
    return names[:n]


def write_rocprof_run(folder: Path, ranks: int, dispatches: int, *, names: int = 40, counters: bool = True,
                      seed: int = 7, first_rank: int = 0) -> dict[int, dict[str, object]]:
    """Write a rocprofv3 CSV run, ``folder/rank000R/<pid>_kernel_trace.csv`` (+ counter_collection),
    and return what each rank's files hold: {rank: {"kernels": n, "counters": n, "total_ns": {name: ns},
    "calls": {name: n}}}, to check a store against."""
    rng = random.Random(seed)
    pool = kernel_names(names)
    expected: dict[int, dict[str, object]] = {}
    for r in range(first_rank, first_rank + ranks):
        d = folder / f"rank{r:04d}"
        d.mkdir(parents=True, exist_ok=True)
        pid = 4000 + r
        total: dict[str, int] = {}
        calls: dict[str, int] = {}
        n_counters = 0
        t = 1_550_000_000_000_000 + r * 1000
        with open(d / f"{pid}_kernel_trace.csv", "w", newline="") as kf, \
                open(d / f"{pid}_counter_collection.csv", "w", newline="") as cf:
            kw = csv.writer(kf, quoting=csv.QUOTE_NONNUMERIC)
            kw.writerow(KERNEL_HEADER)
            cw = csv.writer(cf, quoting=csv.QUOTE_NONNUMERIC) if counters else None
            if cw:
                cw.writerow(COUNTER_HEADER)
            for i in range(1, dispatches + 1):
                name = pool[rng.randrange(len(pool))]
                dur = rng.randrange(1_000, 2_000_000) * (2 if r == 1 else 1)  # rank 1 is the straggler
                t += rng.randrange(100, 5_000)
                kw.writerow(["KERNEL_DISPATCH", f"Agent {4 + r % 8}", 1, 1, pid, i, pool.index(name), name, i,
                             t, t + dur, 0, 0, 8, 0, 16, 256, 1, 1, 65536, 1, 1])
                total[name] = total.get(name, 0) + dur
                calls[name] = calls.get(name, 0) + 1
                if cw and i % 10 == 0:
                    cw.writerow([i, i, f"Agent {4 + r % 8}", 1, pid, pid, 65536, pool.index(name), name, 256, 0, 0,
                                 8, 0, 16, "SQ_WAVES", float(rng.randrange(1, 10_000)), t, t + dur])
                    n_counters += 1
                t += dur
        if not cw:
            (d / f"{pid}_counter_collection.csv").unlink()
        expected[r] = {"kernels": dispatches, "counters": n_counters, "total_ns": total, "calls": calls}
    return expected


def query_url(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` on the store at ``url`` (either backend), as plain tuples."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()
