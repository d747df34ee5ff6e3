"""store/names.py: long kernel names shortened readably, and never two different names alike, checked on
the real names of the DeepSeek, HTA and rocprofv3 samples in tests/data."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from profdb.store.names import MIN_WIDTH, compact, cut_middle, fold, shorten, shorten_all


def kineto_kernel_names(path: Path) -> list[str]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted({e["name"] for e in events if e.get("cat") == "kernel"})


def real_names(data: Path) -> dict[str, list[str]]:
    hta = data / "kineto" / "hta_trace_filter_2ranks"
    rocprof = data / "rocprofv3_csv" / "rocm-systems_2025-08" / "kernel_trace.csv"
    with open(rocprof, newline="") as f:
        rocprof_names = sorted({r["Kernel_Name"] for r in csv.DictReader(f)})
    return {
        "deepseek": kineto_kernel_names(data / "kineto" / "deepseek_train_rank0.json.gz"),
        "hta": sorted(set(kineto_kernel_names(hta / "sampled_rank-0.json.gz"))
                      | set(kineto_kernel_names(hta / "sampled_rank-1.json.gz"))),
        "rocprofv3": rocprof_names,
    }


def test_fold_hides_what_is_inside_brackets() -> None:
    assert fold("f<int, g<x>>(a, b)") == "f<…>(…)"
    assert fold("f<int, g<x>>(a, b)", 1) == "f<int, g<…>>(a, b)"
    assert fold("f()") == "f()"
    assert fold("f<<x>>") == "f<…>"
    assert fold("operator<") == "operator<"  # unbalanced: left as it is


def test_shorten_one_name() -> None:
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
    assert shorten(name, 200) == name
    assert shorten(name, 40) == "vectorized_elementwise_kernel<…>(…)"
    assert compact(name).startswith("vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1> >")
    short = shorten("gemm_bf16_tn_" + "x" * 80 + "_end", 30)
    assert len(short) == 30 and short.startswith("gemm_bf16_tn_") and short.endswith("_end")
    assert len(shorten("a" * 100, 3)) == MIN_WIDTH  # never narrower than MIN_WIDTH
    assert cut_middle("abcdefghij", 5) == "abc…j"


@pytest.mark.parametrize("width", [MIN_WIDTH, 24, 40, 60, 100])
@pytest.mark.parametrize("sample", ["deepseek", "hta", "rocprofv3"])
def test_real_names_fit_and_stay_distinct(data: Path, sample: str, width: int) -> None:
    names = real_names(data)[sample]
    assert names
    short = shorten_all(names, width)
    assert all(len(s) <= width for s in short)
    assert len(set(short)) == len(names), "two different names read the same"
    # a name that fits is shown whole; one that does not is shortened, not just cut
    for n, s in zip(names, short):
        if len(n) <= width:
            assert s == n


def test_real_names_read_as_their_identifier(data: Path) -> None:
    names = real_names(data)["deepseek"]
    assert max(map(len, names)) > 1000
    short = dict(zip(names, shorten_all(names, 60)))
    combine = next(n for n in names if "internode::combine<" in n)
    assert short[combine] == "combine<…>(…)"
    # three grouped GEMMs that compact to the same device_kernel<GemmKernel>(Params): their namespaces tell them apart
    gemms = [short[n] for n in names if "grouped_gemm" in n and "device_kernel" in n]
    assert len(gemms) == 3 and all(g.startswith("device_kernel") for g in gemms)
    assert not any("~" in s for s in short.values())  # the hash is a last resort, not needed at 60


def test_same_name_twice_reads_the_same() -> None:
    long = "void k<" + ", ".join(f"T{i}" for i in range(40)) + ">(int)"
    assert shorten_all([long, long, "x"], 20) == [shorten(long, 20), shorten(long, 20), "x"]
