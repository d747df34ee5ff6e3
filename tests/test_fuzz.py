"""A seeded fuzz corpus over every real sample in tests/data (issue 14): truncations, bit flips and
hostile values (negative, huge, NaN, infinite, text, true, nesting) in each format's own encoding
(JSON and CSV text, gzip recompressed, SQLite cells). Every mutant is ingested into a copy of a
seeded store; the outcome must be one of

- a clean error: a ProfdbError whose message names the input (file or its folder), and the store's
  bytes unchanged;
- a consistent ingest: no negative duration, every time and integer column an integer, every rank
  inside the run's world size, no non-finite summary.

Never any other exception. The corpus is fixed by SEED, so a failure is reproducible by its id; it
runs in well under a minute (big samples get the cheap mutations only, or a real prefix of them)."""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Callable

import pytest

from conftest import DATA
from profdb.store.errors import ProfdbError, RankIdentityError
from profdb.store.identity import IdentityFlags
from profdb.store.ingest import ingest_paths

SEED = 14
#: every input sample; tarballs are archives the tests unpack (PARAM's DLRM set), not an input format
SAMPLES = sorted(
    p for p in DATA.rglob("*") if p.is_file() and p.name != "SOURCES.txt" and not p.name.endswith(".tar.gz")
)
#: per sample; big samples get fewer
MUTANTS = 8
BIG = 400 << 10
HOSTILE = [b"-1", b"1e400", b"NaN", b"99999999999999999999999", b"-9223372036854775809", b"true", b'"x"',
           b"null", b"[]", b"{}", b"-0.5", b"9223372036854775807"]
HOSTILE_CELLS: list[object] = [-1, -(1 << 63), (1 << 63) - 1, "text", None, float("inf"), 1e300, -5, b"\x00\xff"]
_NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

Mutant = Callable[[bytes, random.Random], bytes]


def truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[: rnd.randrange(len(data))]


def flip(data: bytes, rnd: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        i = rnd.randrange(len(out))
        out[i] ^= 1 << rnd.randrange(8)
    return bytes(out)


def hostile_number(data: bytes, rnd: random.Random) -> bytes:
    numbers = list(_NUMBER.finditer(data))
    if not numbers:
        return flip(data, rnd)
    out = data
    for m in sorted(rnd.sample(numbers, min(3, len(numbers))), key=lambda m: -m.start()):
        out = out[: m.start()] + rnd.choice(HOSTILE) + out[m.end() :]
    return out


def deep(data: bytes, rnd: random.Random) -> bytes:
    i = data.find(b"[", rnd.randrange(max(1, len(data) // 2)))
    return data if i < 0 else data[: i + 1] + b"[" * 100000 + b"]" * 100000 + b"," + data[i + 1 :]


def _kineto_prefix(data: bytes, events: int = 300) -> bytes:
    """A big Kineto trace cut to its first events (still the real header, trailer and events)."""
    trace = json.loads(data)
    trace["traceEvents"] = trace["traceEvents"][:events]
    return json.dumps(trace).encode()


def _text_mutants(sample: Path, data: bytes) -> list[Mutant]:
    cheap: list[Mutant] = [truncate, flip]
    if len(data) > 4 * BIG and b"rocprofiler-sdk-tool" in data[:65536]:
        return cheap  # a full read of the 35 MB rocprofv3 JSON takes seconds: truncation and flips only
    return cheap + [hostile_number, hostile_number, hostile_number, deep]


def _sqlite_cell(db: Path, rnd: random.Random) -> None:
    con = sqlite3.connect(db)
    try:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table' and name not like 'sqlite_%'")]
        rnd.shuffle(tables)
        for table in tables:
            cols = [r[1] for r in con.execute(f'pragma table_info("{table}")')]
            rows = con.execute(f'select rowid from "{table}" limit 50').fetchall()
            if not rows or not cols:
                continue
            for _ in range(3):
                col = rnd.choice(cols)
                (rowid,) = rnd.choice(rows)
                try:
                    con.execute(f'update "{table}" set "{col}" = ? where rowid = ?', (rnd.choice(HOSTILE_CELLS), rowid))
                except sqlite3.Error:
                    pass  # a constraint of the producer's schema refused the value: try another
            con.commit()
            return
    finally:
        con.close()


def _write_mutant(sample: Path, dst: Path, kind: int, rnd: random.Random) -> None:
    raw = sample.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    if gz and kind == 0:
        dst.write_bytes(truncate(raw, rnd))  # a cut gzip stream
        return
    data = gzip.decompress(raw) if gz else raw
    is_sqlite = data[:16] == b"SQLite format 3\x00"
    if is_sqlite:
        if kind % 3 == 0:
            data = truncate(data, rnd)
        elif kind % 3 == 1:
            data = flip(data, rnd)
        else:
            tmp = dst.with_name("cells.sqlite")
            tmp.write_bytes(data)
            _sqlite_cell(tmp, rnd)
            data = tmp.read_bytes()
            tmp.unlink()
    else:
        if len(data) > BIG and b'"traceEvents"' in data[:65536]:
            data = _kineto_prefix(data)
        mutants = _text_mutants(sample, data)
        data = mutants[kind % len(mutants)](data, rnd)
    dst.write_bytes(gzip.compress(data, 1) if gz else data)


def _consistent(db: Path) -> None:
    con = sqlite3.connect(db)
    try:
        checks = {
            "negative duration": "select count(*) from activity where duration_ns < 0",
            "non-integer time": "select count(*) from activity where typeof(start_ns) != 'integer' or typeof(duration_ns) != 'integer'",
            "non-integer column": "select count(*) from activity_v where "
            + " or ".join(f"typeof({c}) not in ('integer', 'null')" for c in
                          ("device", "stream", "correlation", "pid", "tid", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")),
            "activity without its launch shape": "select count(*) from activity a left join launch l "
            "on l.id = a.launch_id where l.id is null",
            "activity without its origin": "select count(*) from activity a left join origin o "
            "on o.id = a.origin_id where o.id is null",
            "rank outside the world": "select count(*) from rank k join run r on r.id = k.run_id where k.global_rank < 0 "
            "or (r.world_size is not null and k.global_rank >= r.world_size)",
            "bad counter": "select count(*) from counter where typeof(value) not in ('integer', 'real')",
            "bad summary": "select count(*) from summary where total_ns < 0 or min_ns < 0 or calls < 1",
        }
        for what, query in checks.items():
            assert con.execute(query).fetchone() == (0,), what
    finally:
        con.close()


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("fuzz") / "seed.db"
    ingest_paths([DATA / "kineto" / "torchrun4_cpu" / "rank2_iter5_7.json.gz"], str(db), run="seed")
    return db


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: str(p.relative_to(DATA)))
def test_fuzz_sample(sample: Path, tmp_path: Path, seeded_store: Path) -> None:
    rnd = random.Random(f"{SEED}:{sample.relative_to(DATA)}")
    flags = IdentityFlags()
    try:  # the unmodified sample: which flags it needs (files without a rank get --rank 0)
        ingest_paths([sample], str(tmp_path / "plain.db"), run="plain")
    except RankIdentityError:
        flags = IdentityFlags(rank=0)
    except ProfdbError:
        pass  # not an input profdb reads (e.g. *_stats.csv): its mutants must fail cleanly too
    n = 3 if sample.stat().st_size > BIG else MUTANTS
    for kind in range(n):
        folder = tmp_path / f"m{kind}"
        folder.mkdir()
        mutant = folder / sample.name
        _write_mutant(sample, mutant, kind, rnd)
        db = tmp_path / f"store{kind}.db"
        shutil.copy(seeded_store, db)
        before = db.read_bytes()
        try:
            ingest_paths([mutant], str(db), run=f"fuzz{kind}", flags=flags)
        except ProfdbError as e:
            assert str(folder) in str(e), f"mutant {kind}: message names no file: {e}"
            assert db.read_bytes() == before, f"mutant {kind}: the store changed on error ({e})"
            print(f"{sample.name} m{kind}: {str(e)[len(str(folder)):][:150]}")
            continue
        print(f"{sample.name} m{kind}: ingested")
        _consistent(db)
