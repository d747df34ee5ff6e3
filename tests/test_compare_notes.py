"""Comparisons that do not compare (issue 13): `profdb compare` says when world sizes, hosts, the
kinds of rows or the classification rules differ, and what the figures then mean. Real samples: the
4-rank CPU torchrun job (host "vm", cpu ops only) and 2 ranks of HTA's 128-rank GPU job (no host)."""

from __future__ import annotations

from pathlib import Path

from conftest import Invoke


def test_compare_says_what_differs_and_what_the_figures_mean(data: Path, db_path: Path, run_cli: Invoke) -> None:
    run_cli("ingest", "--db", db_path, "--run", "cpu4", data / "kineto" / "torchrun4_cpu")
    run_cli("ingest", "--db", db_path, "--run", "cpu4-again", data / "kineto" / "torchrun4_cpu")
    run_cli("ingest", "--db", db_path, "--run", "hta", data / "kineto" / "hta_trace_filter_2ranks")

    # like for like: none of the notes
    r = run_cli("compare", "--db", db_path, "cpu4", "cpu4-again")
    for phrase in ("world sizes differ", "different hosts", "different kinds", "different communication rules",
                   "have no data", "not read"):
        assert phrase not in r.stderr

    r = run_cli("compare", "--db", db_path, "cpu4", "hta")
    err = " ".join(r.stderr.split())
    assert "world sizes differ (baseline 4, new 128): the figures are per rank (total / ranks)" in err
    assert "the runs ran on different hosts (baseline vm, new unknown)" in err
    assert (
        "the runs hold different kinds of rows (baseline 'cpu4': annotation, cpu_op; new: annotation, api, cpu_op, "
        "kernel, memcpy, memset): they were profiled differently; the baseline has no kernel rows, so every such "
        "name shows as new and its busy time as 0"
    ) in err
    assert "different communication rules" not in err
    # what the new side's figures leave out: 126 of its 128 ranks
    shown = ", ".join(str(g) for g in range(2, 22)) + " ..."
    assert f"run 'hta': world_size 128 but 126 rank(s) have no data and are not in these figures: {shown}" in err


def test_compare_names_what_either_side_did_not_read(data: Path, db_path: Path, run_cli: Invoke) -> None:
    """A side whose device events profdb did not read (HTA's real MTIA trace): its figures lack them."""
    run_cli("ingest", "--db", db_path, "--run", "mtia", data / "kineto" / "mtia_inference_rank_0.json.gz")
    run_cli("ingest", "--db", db_path, "--run", "cpu", "--rank", "0", data / "kineto" / "torchrun4_cpu" /
            "rank0_iter5_7.json.gz")
    r = run_cli("compare", "--db", db_path, "cpu", "mtia")
    err = " ".join(r.stderr.split())
    assert ("run 'mtia': not read, in no figure: 1,313 events of category mtia_ccp_events (MTIA device events); "
            "823 events of category mtia_runtime (MTIA runtime calls)") in err, err
    assert "run 'cpu': not read" not in err
