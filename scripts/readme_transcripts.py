"""Refresh the README's transcripts (the ``$ profdb ...`` lines of its code blocks and the output under them)
with what profdb prints today, so the README shows real output after a change of format.

    .venv/bin/python scripts/readme_transcripts.py          # rewrites README.md in place; review with git diff

The commands run in order in a temporary folder holding ``examples/`` (a link to the repository's) and a
store ``profdb.db`` that already has the generated run ``gen8`` the README describes
(tests/gen_kineto_run.py, defaults: 8 ranks on 2 hosts, rank 5 slow GEMM, host 1 slower). Output is
stderr then stdout (or stdout only where the README showed only that), as when stdout is a pipe: full
width; a command followed directly by another ``$`` line keeps showing no output."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFDB = Path(sys.executable).parent / "profdb"


def run(line: str, cwd: Path, fails: bool = False) -> tuple[list[str], list[str]]:
    """(stderr lines, stdout lines) of one ``$ profdb ...`` line run in ``cwd``; ``fails``: the README shows
    it failing (its output starts with ``Error:``), so it must exit 1."""
    args = shlex.split(line[len("$ profdb ") :])
    expanded: list[str] = []
    for a in args:  # the shell's globbing of examples/rocprof-8ranks/rank*
        expanded += sorted(str(p.relative_to(cwd)) for p in cwd.glob(a)) if "*" in a and "/" in a else [a]
    env = {k: v for k, v in os.environ.items() if k != "PROFDB_DB"}
    r = subprocess.run([str(PROFDB), *expanded], cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != (1 if fails else 0):
        raise SystemExit(f"{line}: exit {r.returncode}\n{r.stderr}")
    return r.stderr.rstrip("\n").splitlines(), r.stdout.rstrip("\n").splitlines()


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from gen_kineto_run import generate

    from profdb.store.ingest import ingest_paths

    lines = (ROOT / "README.md").read_text().splitlines()
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "examples").symlink_to(ROOT / "examples")
        (cwd / "rank0").mkdir()  # (the Formats section's Nsight Systems report, named by its extension)
        (cwd / "rank0" / "report.nsys-rep").touch()
        gen = generate(cwd / "gen" / "gen8")
        ingest_paths([str(p) for p in sorted(gen.root.glob("rank*"))], str(cwd / "profdb.db"), run="gen8")
        in_block = False
        i = 0
        while i < len(lines):
            line = lines[i]
            out.append(line)
            i += 1
            if line.startswith("```"):
                in_block = not in_block
                continue
            if not (in_block and line.startswith("$ profdb ")):
                continue
            old_end = i
            while old_end < len(lines) and not lines[old_end].startswith(("$ ", "```")):
                old_end += 1
            err, std = run(line, cwd, fails=old_end > i and lines[i].startswith("Error:"))
            if old_end > i:  # the README shows this command's output: stdout only if it did so far
                stdout_only = bool(std) and lines[i][:5] == std[0][:5]
                out += std if stdout_only else err + std
            i = old_end
    (ROOT / "README.md").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    if not re.search(r"profdb", str(PROFDB)):
        raise SystemExit("run with the venv's python: .venv/bin/python scripts/readme_transcripts.py")
    main()
