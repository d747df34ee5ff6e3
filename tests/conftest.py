from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from collections.abc import Generator, Iterable
from typing import Any, Callable

import pytest
from click.testing import CliRunner, Result

from profdb.cli.main import cli

from pg_fixtures import *  # noqa: E402,F401,F403  (store_url, pg_url, pg_server: both backends, see pg_fixtures.py)

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data() -> Path:
    return DATA


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture(autouse=True)
def _no_env_db(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROFDB_DB", raising=False)


@pytest.fixture
def no_user_rules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the shipped communication rules: no rules file, no active rules inherited, and the working
    directory a fresh folder (no ./profdb.toml unless the test writes one)."""
    from profdb.store import classify

    monkeypatch.delenv(classify.RULES_ENV, raising=False)
    monkeypatch.delenv(classify.ACTIVE_ENV, raising=False)
    monkeypatch.setattr(classify, "_active", None)
    monkeypatch.chdir(tmp_path)


Invoke = Callable[..., Result]


@pytest.fixture
def run_cli() -> Invoke:
    def invoke(*args: Any, ok: bool = True) -> Result:
        r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        if ok:
            assert r.exit_code == 0, r.output + r.stderr
        return r

    return invoke


def sql(db: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read the store the way a user would: plain sqlite3."""
    con = sqlite3.connect(db)
    try:
        return con.execute(query, params).fetchall()
    finally:
        con.close()


def union_ns(spans: Iterable[tuple[int, int]]) -> int:
    """The length of the union of (start, end) intervals: what the peers' busy times are (HTA's temporal
    breakdown, TraceLens's GPU timeline), computed here from raw files or stored rows to check profdb's."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def file_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def pytest_report_header() -> str:
    return f"profdb tests, cwd {os.getcwd()}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Under pytest-xdist (scripts/test.sh), a test marked ``alone`` runs while no other worker runs a
    test: it holds a lock file of the run exclusively, every other test holds it shared, over its
    setup, call and teardown (module fixtures included). ``alone``: a real job whose answer depends on
    having the cores to itself (a planted straggler's margin against another test's processes). The
    lock is an empty file in the temp folder, one per run (removing it while workers run would split
    the lock in two)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # (one process: nothing runs beside the test)
        return (yield)
    with open(Path(tempfile.gettempdir()) / f"profdb-tests-{run}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if item.get_closest_marker("alone") else fcntl.LOCK_SH)
        return (yield)


@pytest.fixture(scope="module")
def dlrm_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The 8 ranks of the DLRM Kineto traces (tests/data/kineto/dlrm_8rank), unpacked once per module."""
    import tarfile

    out = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(Path(__file__).parent / "data" / "kineto/dlrm_8rank/dlrm_kineto.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return sorted((out / "dlrm_kineto").glob("worker*.json"))
