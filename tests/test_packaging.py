"""A regular (non-editable) install from a built wheel gives a working `profdb`, migrations included."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_into_fresh_venv(tmp_path: Path, data: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
    )
    wheels = list(dist.glob("profdb-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])], check=True)
    profdb = env_dir / "bin" / "profdb"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROFDB_DB")}
    out = subprocess.run([str(profdb), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert "ingest" in out.stdout
    # the installed package carries its migrations and readers: a real ingest works outside the repo
    r = subprocess.run(
        [str(profdb), "ingest", "--db", "x.db", str(data / "kineto" / "torchrun4_cpu")],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "ranks: 4 of world size 4" in r.stdout
    where = subprocess.run(
        [str(py), "-c", "import profdb.store, profdb.migrations; print(profdb.store.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )
    assert str(env_dir) in where.stdout
    # the Python API: import profdb; profdb.connect(...) answers a question (pandas is optional: not installed)
    api = subprocess.run(
        [str(py), "-c", "import profdb; r = profdb.connect('x.db').imbalance(); print(r.headers[0], len(r.rows))"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert api.returncode == 0, api.stderr
    assert api.stdout.startswith("name ") and int(api.stdout.split()[1]) > 0
    no_pandas = subprocess.run(
        [str(py), "-c", "import profdb; profdb.connect('x.db').runs().to_pandas()"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert no_pandas.returncode != 0 and "pip install 'profdb[pandas]'" in no_pandas.stderr
    # nothing generic lands in site-packages
    site = next(env_dir.glob("lib/python*/site-packages"))
    assert not (site / "store").exists() and not (site / "cli").exists()
    assert not (site / "alembic" / "env.py").exists()


def test_editable_install_points_at_this_checkout() -> None:
    import profdb
    import profdb.cli.main
    import profdb.store

    assert Path(profdb.__file__ or "").resolve() == ROOT / "api" / "__init__.py"

    assert Path(profdb.store.__file__).resolve().parent == ROOT / "store"
    assert Path(profdb.cli.main.__file__).resolve().parent == ROOT / "cli"


def test_alembic_library_not_shadowed() -> None:
    import alembic

    assert not (ROOT / "alembic" / "__init__.py").exists()
    assert "site-packages" in (alembic.__file__ or "")
