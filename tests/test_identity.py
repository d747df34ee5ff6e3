"""Rank identity rules: path patterns, sources in order, conflicts as errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from profdb.store.errors import RankIdentityError
from profdb.store.identity import IdentityFlags, RankClaim, check_claims, path_hint, resolve_file
from profdb.store.manifest import RankManifest, write_manifest
from profdb.store.records import RankHint


@pytest.mark.parametrize(
    "path, rank",
    [
        ("out/rank0003/node01/1234_kernel_trace.csv", 3),
        ("out/rank_3/trace.json", 3),
        ("out/rank3/x.json", 3),
        ("out/rank-3/x.json", 3),
        ("traces/rank-3.json", 3),
        ("traces/rank3_iter10_12.json", 3),
        ("metrix/results.rank0003.json", 3),
        ("hta/sampled_rank-1.json.gz", 1),
        ("ranked/ranking.json", None),
        ("out/frank3/x.json", None),
        ("out/host/1234_kernel_trace.csv", None),
    ],
)
def test_path_patterns(path: str, rank: int | None) -> None:
    assert path_hint(Path(path)).global_rank == rank


def test_rocprof_default_layout_gives_hostname_and_pid() -> None:
    h = path_hint(Path("out/rank0002/nid001234/5678_kernel_trace.csv"))
    assert (h.global_rank, h.hostname, h.pid) == (2, "nid001234", 5678)
    # a rank folder directly holding the file is not a hostname
    h = path_hint(Path("out/rank0002/5678_kernel_trace.csv"))
    assert h.hostname is None and h.pid == 5678


def test_tensorboard_handler_name() -> None:
    # taken only when the file's own pid (the reader's hint) is the name's pid
    h = path_hint(Path("log/gpu-node-7_4242.1712195495519689.pt.trace.json"), 4242)
    assert (h.hostname, h.pid, h.global_rank, h.note) == ("gpu-node-7", 4242, None, "")


@pytest.mark.parametrize("file_pid", [59811, None])
def test_tensorboard_shaped_custom_worker_name_gives_nothing(file_pid: int | None) -> None:
    h = path_hint(Path("kineto/worker0_step_12.1694128201545.pt.trace.json"), file_pid)
    assert (h.hostname, h.pid, h.global_rank) == (None, None, None)
    assert "pid 12" in h.note and "hostname not taken" in h.note


def test_manifest_beats_path_and_fills_identity(tmp_path: Path) -> None:
    d = tmp_path / "rank0001"
    write_manifest(d, RankManifest(global_rank=1, local_rank=1, world_size=4, hostname="n0", launcher="torchrun"))
    f = d / "trace.json"
    f.write_text("{}")
    ident = resolve_file(f, RankHint(), IdentityFlags())
    assert (ident.global_rank, ident.local_rank, ident.hostname, ident.world_size) == (1, 1, "n0", 4)
    assert "manifest" in ident.origin


def test_manifest_in_file_conflict_is_an_error(tmp_path: Path) -> None:
    d = tmp_path / "out" / "rank0001"
    write_manifest(d, RankManifest(global_rank=1))
    f = d / "trace.json"
    f.write_text("{}")
    with pytest.raises(RankIdentityError, match=r"trace\.json.*global_rank = 1.*says 2"):
        resolve_file(f, RankHint(global_rank=2, origin="distributedInfo"), IdentityFlags())


def test_path_in_file_conflict_is_an_error() -> None:
    with pytest.raises(RankIdentityError, match="rank5.json"):
        resolve_file(Path("t/rank5.json"), RankHint(global_rank=3, origin="distributedInfo"), IdentityFlags())


def test_flags_override(tmp_path: Path) -> None:
    ident = resolve_file(
        Path("t/rank5.json"), RankHint(global_rank=3, origin="distributedInfo"), IdentityFlags(rank=7, hostname="h")
    )
    assert (ident.global_rank, ident.hostname) == (7, "h")


def test_no_rank_anywhere() -> None:
    with pytest.raises(RankIdentityError, match=r"trace\.json: cannot tell which rank.*--rank N.*--rank-from-path"):
        resolve_file(Path("x/trace.json"), RankHint(), IdentityFlags())


def test_rank_from_path_regex() -> None:
    flags = IdentityFlags(rank_from_path=r"node(?P<hostname>\d+)_gpu(?P<rank>\d+)")
    ident = resolve_file(Path("logs/node07_gpu13.json"), RankHint(), flags)
    assert (ident.global_rank, ident.hostname) == (13, "07")
    with pytest.raises(RankIdentityError, match="does not match"):
        resolve_file(Path("logs/other.json"), RankHint(), flags)


def _claim(path: str, rank: int, host: str | None = None, world: int | None = None, kind: str = "trace") -> RankClaim:
    ident = resolve_file(Path(path), RankHint(global_rank=rank, hostname=host, world_size=world, origin="x"), IdentityFlags())
    return RankClaim(Path(path), "kineto", kind, ident)


def test_two_files_same_rank() -> None:
    with pytest.raises(RankIdentityError, match=r"b\.json and a\.json both claim rank 0.*--allow-duplicate-ranks"):
        check_claims([_claim("a.json", 0), _claim("b.json", 0)], IdentityFlags())
    plan = check_claims([_claim("a.json", 0), _claim("b.json", 0)], IdentityFlags(allow_duplicate_ranks=True))
    assert list(plan.ranks) == [0]
    # different kinds of data from one rank are fine
    check_claims([_claim("a.csv", 0, kind="kernel_trace"), _claim("b.csv", 0, kind="memory_copy_trace")], IdentityFlags())


def test_world_size_and_hostname_disagreements() -> None:
    with pytest.raises(RankIdentityError, match="world size 8"):
        check_claims([_claim("a.json", 0, world=4), _claim("b.json", 1, world=8)], IdentityFlags())
    with pytest.raises(RankIdentityError, match="hostname"):
        check_claims(
            [_claim("a.csv", 0, host="n1", kind="k"), _claim("b.csv", 0, host="n2", kind="m")], IdentityFlags()
        )
    with pytest.raises(RankIdentityError, match="outside the world size 4"):
        check_claims([_claim("a.json", 5, world=4)], IdentityFlags())


def test_remembered_folders_find_the_manifests_a_fresh_search_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """find_manifest within remembered_folders (one pass over many files: folders stat'ed and
    resolved once) answers what it answers without: the level limit, a stop folder, links and
    relative paths, whichever file of a folder is looked up first."""
    from profdb.store.manifest import find_manifest, remembered_folders

    job = tmp_path / "job"
    write_manifest(job / "a", RankManifest(global_rank=0))
    write_manifest(job / "c" / "r1", RankManifest(global_rank=1))
    deep = job / "a" / "x" / "y" / "z" / "w"
    for d in (deep, job / "b", job / "c" / "r1" / "h", job / "c" / "r2" / "h"):
        d.mkdir(parents=True)
    (job / "l").symlink_to(job / "a" / "x")
    (job / "up").symlink_to(job / "a" / "x" / "y" / "z" / "w")
    files = [job / "a" / "f0", job / "a" / "x" / "f1", job / "a" / "x" / "y" / "f2", deep.parent / "f3", deep / "f4",
             job / "b" / "f5", job / "l" / "y" / "f2", job / "up" / "f6", job / "c" / "r1" / "h" / "f7",
             job / "c" / "r2" / "h" / "f8", job / "l" / ".." / "x" / "f9", Path("job/a/x/y/f2")]
    monkeypatch.chdir(tmp_path)
    cases = [(f, stop) for f in files for stop in (None, job / "a" / "x", job / "l", job)]
    want = [find_manifest(f, stop) for f, stop in cases]
    assert want.count(None) < len(want) - 10 and None in want  # (found and not found, both)
    assert find_manifest(deep / "f4") is None and find_manifest(deep.parent / "f3") == job / "a" / "profdb-rank.json"
    for order in (cases, cases[::-1]):
        with remembered_folders():
            got = {(f, stop): find_manifest(f, stop) for f, stop in order}
        assert [got[c] for c in cases] == want
