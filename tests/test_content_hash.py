"""The digest that makes a re-ingest a no-op (``source_file.content_hash``, migration 0013): BLAKE3 for
new files, and the sha256 of files stored before 0013 still recognised, on both engines."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from alembic import command
from sqlalchemy import text

from conftest import Invoke
from profdb.store import inputs
from profdb.store.db import alembic_config, make_engine
from profdb.store.identity import Identity, RankClaim
from profdb.store.ingest_load import _already_stored

#: BLAKE3 of no bytes (the BLAKE3 paper's test vectors; ``b3sum /dev/null``)
EMPTY_BLAKE3 = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"


def test_digest_is_the_first_224_bits_of_blake3_as_b3sum_prints_it(tmp_path: Path) -> None:
    """``blake3:`` and the first 56 hex digits of the standard BLAKE3 output (an extendable output: the
    shorter digest is a prefix of ``b3sum``'s), from the file or from its bytes alike; sha256 on
    request, as 64 bare hex digits (the pre-0013 form)."""
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert inputs.digest_of(empty) == "blake3:" + EMPTY_BLAKE3[:56]
    assert len(inputs.digest_of(empty)) == 63  # (fits the column's 64 characters)
    big = tmp_path / "big"
    data = bytes(range(256)) * 9000  # (past the 1 MiB read chunk)
    big.write_bytes(data)
    assert inputs.digest_of(big) == inputs.digest_of_bytes(data) != inputs.digest_of(empty)
    assert inputs.digest_of(big, "sha256") == hashlib.sha256(data).hexdigest()
    assert inputs.algorithm_of(inputs.digest_of(big)) == "blake3"
    assert inputs.algorithm_of(hashlib.sha256(data).hexdigest()) == "sha256"


def _ident(rank: int) -> Identity:
    return Identity(rank, None, "h", None, None, None, None, "test")


def test_an_input_is_stored_by_its_digest_or_by_the_sha256_of_a_stored_file_of_its_size(tmp_path: Path) -> None:
    """``_already_stored``: by the blake3 digest; by sha256 only against a pre-0013 file of the same
    rank and size (one of another size, or of another rank, is not hashed against); the same size with
    other bytes is new."""
    from profdb.store import readers

    reader = readers.by_name("kineto")
    files = {}
    for name, content in (("a", b"x" * 100), ("b", b"y" * 100), ("c", b"z" * 50)):
        files[name] = tmp_path / name
        files[name].write_bytes(content)

    def inp(name: str, rank: int) -> inputs.InputFile:
        p = files[name]
        i = inputs.InputFile(p, reader, None, p.stat().st_size, inputs.digest_of(p), str(p))  # type: ignore[arg-type]
        i.claim = RankClaim(p, "kineto", "", _ident(rank))
        return i

    sha = {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in files.items()}
    present = {(0, sha["a"]): 100, (1, inputs.digest_of(files["c"])): 50}
    got = _already_stored(present, [inp("a", 0), inp("b", 0), inp("a", 1), inp("c", 1), inp("c", 0)])
    assert got == [True, False, False, True, False]
    calls: list[tuple[Path, str]] = []
    plain = inputs.digest_of

    def counting(path: Path, algorithm: str = inputs.ALGORITHM) -> str:
        calls.append((path, algorithm))
        return plain(path, algorithm)

    import profdb.store.ingest_load as ingest

    ingest.digest_of = counting  # type: ignore[assignment]
    try:
        _already_stored(present, [inp("c", 0), inp("a", 1)])
    finally:
        ingest.digest_of = plain  # type: ignore[assignment]
    assert calls == []  # (no stored sha256 file of their rank and size: nothing hashed again)


def _migrate(url: str, fn: str, rev: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        getattr(command, fn)(alembic_config(conn), rev)
    engine.dispose()


def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    engine = make_engine(url)
    with engine.connect() as c:
        rows = [tuple(r) for r in c.execute(text(query))]
    engine.dispose()
    return rows


def test_0013_keeps_stored_sha256_and_a_reingest_of_those_files_stays_a_no_op(
    store_url: str, data: Path, run_cli: Invoke, tmp_path: Path
) -> None:
    """A store ingested before 0013 (its files known by their sha256) upgraded on both engines: the
    digests are kept as they were, ``source_v`` shows them as ``content_hash``, and ingesting the same
    files again adds nothing (they are hashed with sha256 to be compared); a file of a new rank is
    stored with its BLAKE3 digest. A downgrade keeps BLAKE3 digests as they are."""
    run = tmp_path / "torchrun4_cpu"
    shutil.copytree(data / "kineto" / "torchrun4_cpu", run)
    three = sorted(run.glob("rank[012]_*"))
    r = run_cli("ingest", "--db", store_url, "--run", "job", *three)
    assert r.exit_code == 0, r.output
    digests = _rows(store_url, "select path, content_hash from source_file order by path")
    assert [d for _p, d in digests] == [inputs.digest_of(p) for p in three]
    # a BLAKE3 digest has no sha256 form: the downgrade keeps it as it is
    _migrate(store_url, "downgrade", "0012")
    assert _rows(store_url, "select path, sha256 from source_file order by path") == digests
    _migrate(store_url, "upgrade", "head")
    assert _rows(store_url, "select path, content_hash from source_file order by path") == digests
    # as profdb wrote them before 0013: the sha256 of each file
    engine = make_engine(store_url)
    with engine.begin() as c:
        for p in three:
            c.execute(text("update source_file set content_hash = :h where path = :p"),
                      {"h": hashlib.sha256(p.read_bytes()).hexdigest(), "p": str(p.resolve())})
    engine.dispose()
    _migrate(store_url, "downgrade", "0012")
    old = _rows(store_url, "select path, sha256 from source_file order by path")
    assert old == [(str(p.resolve()), hashlib.sha256(p.read_bytes()).hexdigest()) for p in three]
    assert _rows(store_url, "select run, global_rank, sha256 from source_v order by global_rank")[0][2] == old[0][1]
    activity = _rows(store_url, "select count(*) from activity")
    _migrate(store_url, "upgrade", "head")
    assert _rows(store_url, "select path, content_hash from source_file order by path") == old
    assert _rows(store_url, "select content_hash from source_v order by global_rank")[0][0] == old[0][1]
    r = run_cli("ingest", "--db", store_url, "--run", "job", run)
    assert r.exit_code == 0, r.output
    assert "3 already present (skipped)" in r.output and "files: 1 ingested" in r.output
    rows = dict(_rows(store_url, "select path, content_hash from source_file"))
    fourth = next(run.glob("rank3_*"))
    assert rows[str(fourth.resolve())] == inputs.digest_of(fourth)
    assert {p: rows[p] for p, _h in old} == dict(old)
    assert _rows(store_url, "select count(*) from activity")[0][0] > activity[0][0]  # (rank 3's rows only)
