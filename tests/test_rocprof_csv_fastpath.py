"""The rocprofv3 CSV reader splits usual lines as bytes around the kernel name and sends any other
line through the csv module: on hostile lines (quotes and commas in names, names over two lines,
empty, quoted or float cells, CRLF, a BOM, blank lines) in every position of the file, including
first, it must give exactly what the csv module reads."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from profdb.store.readers import rocprof_csv
from profdb.store.records import Activity, Counter

KT = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
    '"Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count",'
    '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"'
)
KT_ROWS = [
    '"KERNEL_DISPATCH","Agent 4",1,1,834304,1,10,"void add<float>(float*, int)",1,100,200,0,0,8,0,16,64,1,1,1024,1024,1',
    '"KERNEL_DISPATCH","Agent 4",1,1,834304,2,10,"op""x""(a, b)",2,100,250,0,0,8,0,16,64,1,1,1024,1024,1',
    '"KERNEL_DISPATCH","Agent 5",1,,834304,3,10,"two\nlines, name",3,100,300,0,0,8,0,16,64,1,1,1024,1024,1',
    "",
    '"KERNEL_DISPATCH","Agent 4",1,1,834304,4,10,"float cell",4,100,400,0,0,8,0,16,64.0,1,1,1024,1024,1',
    '"KERNEL_DISPATCH","Agent 4",1,"1",834304,5,10,"q,uoted,num",5,100,500,0,0,8,0,16,64,1,1,1024,1024,1',
    '"KERNEL_DISPATCH","Agent, 4",1,1,834304,6,10,"comma in agent",6,100,600,0,0,8,0,16,64,1,1,1024,1024,1',
    "KERNEL_DISPATCH,4,1,1,834304,7,10,unquoted name,7,100,700,0,0,8,0,16,64,1,1,1024,1024,1",
    'KERNEL_DISPATCH,"Agent 4",1,1,834304,9,10,"na""me",8,100,800,0,0,8,0,16,64,1,1,1024,1024,1',
    '"KERNEL_DISPATCH","Agent 4",1,1,834304,8,10,"l\u00e4st \u00fc",8,100,800,0,0,8,0,16,64,1,1,1024,1024,1',
    '"KERNEL_DISPATCH","Agent 4",1,1,834304,8,10,"void add<float>(float*, int)",1,100,200,0,0,8,0,16,64,1,1,1024,1024,1',
]
CC = (
    '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size","Kernel_Id",'
    '"Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count",'
    '"Counter_Name","Counter_Value","Start_Timestamp","End_Timestamp"'
)
CC_ROWS = [
    '1,1,"Agent 1",1,15606,15606,1048576,17,"void a<float>(x, y)",64,0,0,8,0,16,"SQ_WAVES",16384.000000,32,48',
    '1,1,"Agent 1",1,15606,15606,1048576,17,"b""q""",64,0,0,8,0,16,"SQ_WAVES",16384.000000,32,48',
    '1,"2","Agent 1",1,15606,15606,1048576,17,"c, d",64,0,0,8,0,16,"SQ,X","1e3",32,48',
    '1,,"Agent 1",1,15606,15606,1048576,17,"e",64,0,0,8,0,16,"GRBM",5,32,48',
    '1,3,"Agent 1",1,15606,15606,1048576,17,"f",64,0,0,8,0,16,GRBM2,5.5,32,48',
    '1,3,"Agent 1",1,15606,15606,1048576,17,"f",64,0,0,8,0,16,"GR""BM3",5.5,32,48',
    '1,3,"Agent 1",1,15606,15606,1048576,17,"void a<float>(x, y)",64,0,0,8,0,16,"SQ_WAVES",7,32,48',
]


def _int(v: str) -> int | None:
    return None if v == "" else int(float(v))


def _expected_kernels(text: str) -> list[Activity]:
    out = []
    for r in csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline="")):
        agent = r["Agent_Id"].rsplit(" ", 1)[-1] if r["Agent_Id"].startswith("A") else r["Agent_Id"]
        try:
            dev: int | None = int(agent)
        except ValueError:
            dev = None
        start = int(r["Start_Timestamp"])
        out.append(Activity(
            "kernel", r["Kernel_Name"], start, int(r["End_Timestamp"]) - start, None, dev, _int(r["Stream_Id"]),
            _int(r["Correlation_Id"]), None, _int(r["Thread_Id"]), _int(r["Grid_Size_X"]), _int(r["Grid_Size_Y"]),
            _int(r["Grid_Size_Z"]), _int(r["Workgroup_Size_X"]), _int(r["Workgroup_Size_Y"]), _int(r["Workgroup_Size_Z"]),
        ))
    return out


def _expected_counters(text: str) -> list[Counter]:
    return [
        Counter(r["Kernel_Name"], r["Counter_Name"], float(r["Counter_Value"]), _int(r["Dispatch_Id"]))
        for r in csv.DictReader(io.StringIO(text, newline=""))
    ]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_kernel_trace_lines_read_as_the_csv_module_reads_them(tmp_path: Path, newline: str, bom: str) -> None:
    path = tmp_path / "1_kernel_trace.csv"
    for first in range(len(KT_ROWS)):  # every hostile line also comes first, where the shape is learnt
        rows = KT_ROWS[first:] + KT_ROWS[:first]
        text = bom + KT + newline + newline.join(rows) + newline
        path.write_bytes(text.encode())
        got = list(rocprof_csv.read(path, rocprof_csv.inspect(path)))
        assert got == _expected_kernels(text.replace(newline, "\n")), first


def test_counter_lines_read_as_the_csv_module_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "1_counter_collection.csv"
    for first in range(len(CC_ROWS)):
        rows = CC_ROWS[first:] + CC_ROWS[:first]
        text = CC + "\n" + "\n".join(rows) + "\n"
        path.write_text(text)
        got = list(rocprof_csv.read(path, rocprof_csv.inspect(path)))
        assert got == _expected_counters(text), first


def test_a_bad_number_on_a_usual_line_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "1_kernel_trace.csv"
    path.write_text(KT + "\n" + KT_ROWS[0] + "\n" + KT_ROWS[0].replace(",100,200,", ",100,2x0,") + "\n")
    with pytest.raises(Exception, match=r"1_kernel_trace.csv: line 3"):
        list(rocprof_csv.read(path, rocprof_csv.inspect(path)))


def test_empty_cells_anywhere_in_many_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty integer cells spread over thousands of rows and many record batches (validity bitmaps of
    many bytes, read by ``null_mask``): the same records as the csv module's."""
    import random

    rnd = random.Random(5)
    lines = []
    for i in range(5_000):
        stream = "" if rnd.random() < 0.2 else str(rnd.randrange(4))
        corr = "" if rnd.random() < 0.1 else str(i)
        lines.append(f'"KERNEL_DISPATCH","Agent 4",1,{stream},834304,{i},10,"k{i % 7}",{corr},{100 + i},{300 + 2 * i},'
                     "0,0,8,0,16,64,1,1,1024,1024,1")
    text = KT + "\n" + "\n".join(lines) + "\n"
    path = tmp_path / "1_kernel_trace.csv"
    path.write_text(text)
    monkeypatch.setattr(rocprof_csv, "BLOCK", 4096)
    assert len(list(rocprof_csv.read_columns(path, rocprof_csv.inspect(path)))) > 20
    assert list(rocprof_csv.read(path, rocprof_csv.inspect(path))) == _expected_kernels(text)


def test_reading_columns_does_not_import_pandas() -> None:
    """pyarrow's ``Array.to_numpy`` imports pandas when it is installed (~0.4 s CPU and tens of MB in
    every parsing process): the real traces, kernels and counters, are read without it."""
    import subprocess
    import sys

    pytest.importorskip("pandas")
    data = Path(__file__).parent / "data" / "rocprofv3_csv" / "rocm-systems_2025-08"
    code = (
        "import sys\nfrom pathlib import Path\nfrom profdb.store.readers import rocprof_csv\n"
        f"for name in ('kernel_trace.csv', 'counter_collection.csv'):\n"
        f"    p = Path({str(data)!r}) / name\n"
        "    assert sum(len(b) for b in rocprof_csv.read_columns(p, rocprof_csv.inspect(p))) > 0\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _many_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool = False) -> tuple[Path, str]:
    """A kernel trace of the hostile lines over and over, read in blocks of 512 bytes (~100 blocks)."""
    import gzip

    rows = [r for r in KT_ROWS if "64.0" not in r]  # (a float cell: the reader starts again, unpaced)
    text = KT + "\n" + "\n".join(rows * 40) + "\n"
    path = tmp_path / "1_kernel_trace.csv"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    monkeypatch.setattr(rocprof_csv, "BLOCK", 512)
    return path, text


def _paced_streams(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The paced streams the reader makes from now on (``rocprof_columns._Paced``), as it makes them."""
    from profdb.store.readers import rocprof_columns

    streams: list[Any] = []
    real = rocprof_columns._Paced

    def paced(raw: object) -> Any:
        streams.append(real(raw))
        return streams[-1]

    monkeypatch.setattr(rocprof_columns, "_Paced", paced)
    return streams


@pytest.mark.parametrize("gz", [False, True])
def test_a_paced_reader_reads_a_few_blocks_ahead_of_the_batches_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool
) -> None:
    """pyarrow's reader would read 32 blocks ahead of what is taken from it (128 MB a file at 4 MB blocks):
    a consumer that takes one batch and waits finds at most AHEAD + 1 more blocks read, and every line
    is read as the csv module reads it."""
    import time

    from profdb.store.readers import rocprof_columns

    path, text = _many_blocks(tmp_path, monkeypatch, gz)
    streams = _paced_streams(monkeypatch)
    batches = rocprof_csv.read_columns(path, rocprof_csv.inspect(path))
    next(batches)
    time.sleep(0.3)  # (time for the reader's I/O thread to read ahead, were it free to)
    assert len(streams) == 1
    assert streams[0]._reads <= streams[0]._taken + rocprof_columns.AHEAD + 1
    rest = list(batches)
    assert len(rest) > 40
    assert list(rocprof_csv.read(path, rocprof_csv.inspect(path))) == _expected_kernels(text)


def test_a_reader_left_mid_file_lets_its_file_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches left untaken (an error further on, the ingest stopped): the stream reads as at its end,
    so the reader's I/O thread, held back by the pacing, does not wait forever, and the file is closed."""
    import time

    from profdb.store.readers import rocprof_columns

    path, _text = _many_blocks(tmp_path, monkeypatch)
    streams = _paced_streams(monkeypatch)
    batches = rocprof_csv.read_columns(path, rocprof_csv.inspect(path))
    next(batches)
    batches.close()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while not streams[0]._raw.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert streams[0].closed and streams[0]._raw.closed


def test_a_reader_held_back_too_far_still_reads_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no block ahead allowed (batch k needs block k + 1), only the STARVED rule moves the reader:
    it never waits forever, and reads every line."""
    from profdb.store.readers import rocprof_columns

    path, text = _many_blocks(tmp_path, monkeypatch)
    monkeypatch.setattr(rocprof_columns, "AHEAD", 0)
    monkeypatch.setattr(rocprof_columns, "STARVED", 0.01)
    assert list(rocprof_csv.read(path, rocprof_csv.inspect(path))) == _expected_kernels(text)


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_process_left_with_a_reader_open_mid_file_exits_cleanly(tmp_path: Path, ending: str) -> None:
    """A reader still open when the interpreter ends (held by a global, or by an exception's frames):
    its stream is closed before finalization, so pyarrow's I/O thread never enters Python during it
    (which aborted the process: "Fatal Python error: PyGILState_Release")."""
    import subprocess
    import sys

    rows = [r for r in KT_ROWS if "64.0" not in r]
    path = tmp_path / "1_kernel_trace.csv"
    path.write_text(KT + "\n" + "\n".join(rows * 40) + "\n")
    code = f"""
from pathlib import Path
from profdb.store.readers import rocprof_csv
rocprof_csv.BLOCK = 512
path = Path({str(path)!r})
batches = rocprof_csv.read_columns(path, rocprof_csv.inspect(path))
next(batches)
if {ending == "raises"}:
    raise SystemExit("stopped mid-file")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "Fatal Python error" not in done.stderr
    assert done.returncode == (1 if ending == "raises" else 0), done.stderr[-2000:]


REAL_CSV = sorted(  # (the traces: not the *_stats.csv files beside them)
    p for p in [*(Path(__file__).parent / "data" / "rocprofv3_csv").glob("*/*.csv"),
                *(Path(__file__).parents[1] / "examples" / "rocprof-8ranks" / "rank0003").glob("*/*.csv")]
    if rocprof_csv.detect(p)
)


@pytest.mark.parametrize("path", REAL_CSV, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_files_read_in_paced_blocks_as_in_one(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real rocprofv3 outputs (tests/data, the shipped example) read in blocks of 1 KB through the
    paced stream: the same records, or the same error, as read in one block."""
    from profdb.store.readers import rocprof_columns

    def read() -> object:
        try:
            return list(rocprof_csv.read(path, rocprof_csv.inspect(path)))
        except Exception as e:  # (the truncated sample's error, the same both ways)
            return str(e)

    whole = read()
    streams = _paced_streams(monkeypatch)
    monkeypatch.setattr(rocprof_csv, "BLOCK", 1024)
    assert read() == whole
    if path.stat().st_size > 1024 and rocprof_csv.inspect(path).kind in rocprof_csv.COLUMNAR_KINDS:
        assert streams
