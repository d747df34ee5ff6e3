"""Communication classes as data (issue 13): shipped rule sets, user rules, a stable serialisation,
checked on the real DeepSeek training trace against sums computed from the raw file."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profdb.cli.main import cli
from profdb.store import classify
from profdb.store.errors import InputError

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


pytestmark = pytest.mark.usefixtures("no_user_rules")


def _gpu_share(db: Path) -> float:
    with sqlite3.connect(db) as conn:
        comm, total = conn.execute(
            "select sum(case when category = 'communication' then duration_ns else 0 end), sum(duration_ns) "
            "from activity where kind in ('kernel', 'memcpy', 'memset')"
        ).fetchone()
    return float(comm) / float(total)


def _ingest(db: Path, path: Path, *extra: str) -> str:
    r = CliRunner().invoke(cli, ["ingest", "--db", str(db), *extra, str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return str(r.stderr)


def test_deepseek_deepep_kernels_are_communication(data: Path, tmp_path: Path) -> None:
    path = data / "kineto" / "deepseek_train_rank0.json.gz"
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    # from the raw file: DeepEP's expert-parallel all-to-all kernels (dispatch, combine, notify_dispatch,
    # cached_notify in dpsk::ep::internode), and no NCCL kernels at all
    deepep = re.compile(r"^void dpsk::ep::internode::(dispatch|combine|notify_dispatch|cached_notify)<")
    total_us = sum(e["dur"] for e in events)
    comm_us = sum(e["dur"] for e in events if deepep.match(e["name"]))
    assert not any("nccl" in e["name"].lower() for e in events)
    expected = comm_us / total_us
    assert 0.4 < expected < 0.5  # ~46% of GPU time (combine alone ~20%)

    err = _ingest(tmp_path / "now.db", path)
    assert "shipped v" in err and "deepep" in err
    assert _gpu_share(tmp_path / "now.db") == pytest.approx(expected, rel=1e-6)

    # the same trace with the DeepEP rule set disabled by the user: nothing is communication (the old answer)
    (tmp_path / "profdb.toml").write_text('[classify]\ndisable = ["deepep"]\n')
    err = _ingest(tmp_path / "old.db", path)
    assert "disabled: deepep" in err
    assert _gpu_share(tmp_path / "old.db") == 0.0


def test_broadcast_tensors_is_compute_unless_the_user_says(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = data / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    with gzip.open(path, "rt") as f:
        n = sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("name") == "aten::broadcast_tensors")
    assert n > 0
    q = "select category, count(*) from activity_v where name = 'aten::broadcast_tensors' group by category"
    _ingest(tmp_path / "a.db", path, "--rank", "0")
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert conn.execute(q).fetchall() == [("compute", n)]
    # a user rules file, and --comm-pattern, put the user's rules first
    rules = tmp_path / "mine.toml"
    rules.write_text("[[ruleset]]\nname = 'mine'\npatterns = ['^aten::broadcast_tensors$']\n")
    monkeypatch.setenv(classify.RULES_ENV, str(rules))
    err = _ingest(tmp_path / "b.db", path, "--rank", "0")
    assert "1 user rule(s)" in err
    with sqlite3.connect(tmp_path / "b.db") as conn:
        assert conn.execute(q).fetchall() == [("communication", n)]
    monkeypatch.delenv(classify.RULES_ENV)
    _ingest(tmp_path / "c.db", path, "--rank", "0", "--comm-pattern", "broadcast_tensors")
    with sqlite3.connect(tmp_path / "c.db") as conn:
        assert conn.execute(q).fetchall() == [("communication", n)]
    # the CLI's rules do not outlive the command
    assert classify.category("cpu_op", "aten::broadcast_tensors") == "compute"


@pytest.mark.parametrize(
    "kind, name, cat, ruleset",
    [
        ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication", "nccl"),
        ("annotation", "nccl:all_reduce", "communication", "nccl"),
        ("api", "ncclGetVersion", "communication", "nccl"),
        ("annotation", "gloo:all_reduce", "communication", "gloo"),
        ("cpu_op", "c10d::broadcast_", "communication", "c10d"),
        ("cpu_op", "_c10d_functional::wait_tensor", "communication", "c10d"),
        ("cpu_op", "record_param_comms", "communication", "c10d"),
        ("kernel", "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "communication", "deepep"),
        ("kernel", "void deep_ep::internode_ll::combine<false>(void*)", "communication", "deepep"),
        ("kernel", "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)", "compute", None),
        ("kernel", "void nvshmemi_transfer_rma_kernel(int)", "communication", "nvshmem"),
        ("kernel", "void mscclpp::allreduce7<float>(float*)", "communication", "msccl"),
        ("api", "ucc_collective_post", "communication", "ucc"),
        ("annotation", "MPI_Allreduce", "communication", "mpi"),
        ("api", "MPIDI_progress", "other", None),
        ("cpu_op", "aten::broadcast_tensors", "compute", None),
        ("cpu_op", "aten::all_gather_into_tensor", "communication", "collectives"),
        ("memcpy", "Memcpy DtoD (nccl staging)", "memory", None),
        ("api", "hipLaunchKernel", "other", None),
    ],
)
def test_shipped_rules(kind: str, name: str, cat: str, ruleset: str | None) -> None:
    rules = classify.load_rules()
    assert rules.category(kind, name) == cat
    rule = rules.matching(kind, name)
    assert (rule.ruleset if rule else None) == ruleset


def test_serialisation_is_stable_and_round_trips() -> None:
    a, b = classify.load_rules(), classify.load_rules()
    assert a.serialise() == b.serialise() and a.digest == b.digest and len(a.digest) == 16
    back = classify.Rules.from_serialised(a.serialise())
    assert back == a and back.digest == a.digest
    mine = classify.load_rules(["^foo$"])
    assert mine.digest != a.digest and mine.user_rules == 1 and mine.rules[0].ruleset == "--comm-pattern"
    assert classify.Rules.from_serialised(mine.serialise()).category("kernel", "foo") == "communication"


def test_rules_can_reclass_to_any_category(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "r.toml"
    f.write_text("[[ruleset]]\nname = 'not-comm'\ncategory = 'compute'\nkinds = ['kernel']\npatterns = ['^ncclFake']\n")
    monkeypatch.setenv(classify.RULES_ENV, str(f))
    rules = classify.load_rules()
    assert rules.category("kernel", "ncclFakeKernel") == "compute"
    assert rules.category("api", "ncclFakeKernel") == "communication"  # kinds limit the user rule


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[ruleset]]\nname = 'x'\npatterns = ['(']\n", "not a valid regular expression"),
        ("[[ruleset]]\nname = 'x'\ncategory = 'net'\npatterns = ['a']\n", "category 'net'"),
        ("[[ruleset]]\nname = 'x'\n", "non-empty 'patterns'"),
        ("disable = ['nope']\n", "unknown rule set(s) nope"),
        ("[[ruleset\n", "not valid TOML"),
    ],
)
def test_bad_user_rules_are_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str) -> None:
    f = tmp_path / "r.toml"
    f.write_text(text)
    monkeypatch.setenv(classify.RULES_ENV, str(f))
    with pytest.raises(InputError, match=re.escape(message)):
        classify.load_rules()
    r = CliRunner().invoke(cli, ["ingest", "--db", str(tmp_path / "x.db"), str(f)])
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output


def test_bad_comm_pattern_is_a_usage_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["ingest", "--db", str(tmp_path / "x.db"), "--comm-pattern", "(", str(tmp_path)])
    assert r.exit_code == 2 and "--comm-pattern" in r.output


def test_using_exports_the_rules_for_workers_and_restores() -> None:
    import os

    mine = classify.load_rules(["^halo$"])
    with classify.using(mine):
        # a worker process (forked or spawned) rebuilds exactly these rules from the environment
        assert classify.Rules.from_serialised(os.environ[classify.ACTIVE_ENV]).digest == mine.digest
        assert classify.category("kernel", "halo") == "communication"
    assert classify.ACTIVE_ENV not in os.environ
    assert classify.category("kernel", "halo") == "compute"
