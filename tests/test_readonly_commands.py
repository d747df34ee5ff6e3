"""Commands that only read open the store read-only (issue 14): ``profdb sql`` cannot write without
--write on either engine, whatever the statement string holds; its rows are streamed with a cap, so
a recursive CTE without end stops with a note; a store in a folder this user cannot write is queried.
(Readers beside a running ingest: tests/test_signals.py.)"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Invoke
from sqlalchemy import text

from profdb.store.db import open_db

KINETO = Path(__file__).parent / "data" / "kineto" / "torchrun4_cpu"
ENDLESS = "with recursive c(x) as (select 1 union all select x + 1 from c) select x from c"


def _counts(url: str) -> dict[str, int]:
    engine = open_db(url, readonly=True)
    try:
        with engine.connect() as c:
            return {t: int(c.execute(text(f"select count(*) from {t}")).scalar_one()) for t in ("run", "activity")}
    finally:
        engine.dispose()


def test_sql_cannot_write_without_write(store_url: str, run_cli: Invoke) -> None:
    run_cli("ingest", "--db", store_url, "--run", "a", KINETO / "rank0_iter5_7.json.gz")
    before = _counts(store_url)
    statements = ["delete from activity", "drop table activity"]
    if store_url.startswith("postgresql"):
        statements += ["select 1; commit; delete from activity", "commit; delete from activity; commit"]
    for statement in statements:
        r = run_cli("sql", statement, "--db", store_url, ok=False)
        assert r.exit_code == 1, (statement, r.output)
        assert "Traceback" not in r.stderr, r.stderr
        if not statement.startswith("select 1;"):  # (a server-side cursor holds one query: a syntax error)
            assert "read-only" in r.stderr and "--write" in r.stderr, r.stderr
        assert _counts(store_url) == before, statement
    run_cli("sql", "delete from step", "--db", store_url, "--write")
    assert run_cli("sql", "select count(*) as n from step", "--db", store_url, "--format", "csv").stdout == "n\n0\n"


def test_sql_rows_stop_at_the_cap(store_url: str, run_cli: Invoke) -> None:
    run_cli("ingest", "--db", store_url, "--run", "a", KINETO / "rank0_iter5_7.json.gz")
    r = run_cli("sql", ENDLESS, "--db", store_url, "--format", "csv", "--max-rows", "1000")
    assert r.stdout.splitlines() == ["x", *[str(i) for i in range(1, 1001)]]
    assert "stopped after 1,000 rows; add a LIMIT, or raise the cap with --max-rows" in r.stderr
    # the default cap ends it too, and a result under the cap has no note
    r = run_cli("sql", ENDLESS, "--db", store_url, "--format", "jsonl")
    assert len(r.stdout.splitlines()) == 100_000 and "stopped after 100,000 rows" in r.stderr
    r = run_cli("sql", "select count(*) as n from activity", "--db", store_url)
    assert "stopped" not in r.stderr


@contextmanager
def _unwritable(folder: Path) -> Iterator[Path]:
    """``folder`` as this user cannot write it: 0555 for a user; root writes anywhere, so for root
    a read-only bind mount of it (a read-only mount, as on a shared file system exported ro)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    view = folder.parent / (folder.name + "-ro")
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True).returncode != 0:
        view.rmdir()
        pytest.skip("running as root without the right to mount: no folder root cannot write")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
        yield view
    finally:
        # a lazy unmount when something (a pooled connection, a sibling pytest pruning old temp dirs) still
        # holds the view: the test must never leave a mount behind
        if subprocess.run(["umount", str(view)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(view)], check=True)
        view.rmdir()


def test_a_store_in_an_unwritable_folder_is_queryable(tmp_path: Path, run_cli: Invoke) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    run_cli("ingest", "--db", folder / "s.db", "--run", "a", KINETO)
    assert sorted(p.name for p in folder.iterdir()) == ["s.db"]  # no -wal/-shm left by the ingest
    before = (folder / "s.db").read_bytes()
    with _unwritable(folder) as ro:
        db = ro / "s.db"
        with pytest.raises(OSError):
            (ro / "probe").touch()
        r = run_cli("query", "--hotspots", "--db", db, "--format", "csv")
        assert r.stdout.startswith("name,") and len(r.stdout.splitlines()) > 1
        assert run_cli("sql", "select count(*) as n from rank", "--db", db, "--format", "csv").stdout == "n\n4\n"
        assert "a" in run_cli("runs", "--db", db, "--format", "csv").stdout
        r = run_cli("ingest", "--db", db, "--run", "b", KINETO, ok=False)
        assert r.exit_code == 1 and "cannot be written" in r.stderr, r.stderr
        assert sorted(p.name for p in ro.iterdir()) == ["s.db"]
    assert (folder / "s.db").read_bytes() == before


@pytest.mark.parametrize("command", [["runs"], ["query", "--hotspots"], ["sql", "select 1"]])
def test_readers_do_not_create_a_store(tmp_path: Path, run_cli: Invoke, command: list[str]) -> None:
    r = run_cli(*command, "--db", tmp_path / "none.db", ok=False)
    assert r.exit_code == 1 and "no profdb store" in r.stderr
    assert list(tmp_path.iterdir()) == []
