"""``source_file.sha256`` becomes ``content_hash`` (issue 15, ingest at the speed of the machine): the
digest that makes a re-ingest a no-op (files are unique by rank and content) is BLAKE3 for the files
ingested from now on, written ``blake3:<56 hex digits>`` (its first 224 bits: ``b3sum`` prints them
first); the files stored before keep their sha256, 64 hex digits with no prefix.

Why: every input byte is hashed before its rows are stored, and sha256 runs at ~190-370 MB/s a core on
a CPU without SHA instructions (the benchmarks' machine: 2.7 s CPU of the 515 MB long-name run's ~8 s
ingest, a third of it); BLAKE3, collision-resistant too, at ~4.4 GB/s on one core with AVX-512 (ccache
moved to it for the same reason). 224 bits keep the column's 64 characters, so nothing is rewritten.
A file stored with its sha256 is still recognised: an input of the same rank and size as one is hashed
with sha256 too (``ingest._already_stored``).

    source_file   sha256 -> content_hash (same type; the unique constraint on (rank_id, it) keeps its
                  name, uq_source_file_rank_id_sha256: SQLite renames a constraint only by rebuilding
                  the table, whose children's ON DELETE CASCADE the rebuild's DROP would fire)
    source_v      sha256 -> content_hash

Downgrade renames the column back; BLAKE3 digests stay (they have no sha256 form): a pre-0013 profdb
does not recognise those files if they are ingested again, and its one-file-of-a-kind-per-rank check
stops such an ingest with its message.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_SOURCE_V = """
        SELECT r.name AS run, k.hostname, k.global_rank, k.local_rank, s.path, s.format, s.content_kind, s.rows, s.size_bytes, s.{column},
               s.identity_origin, s.ingested_at
        FROM source_file s JOIN rank k ON k.id = s.rank_id JOIN run r ON r.id = k.run_id"""  # noqa: E501 (0001's text)


def _rename(old: str, new: str) -> None:
    op.execute("DROP VIEW source_v")
    op.execute(f"ALTER TABLE source_file RENAME COLUMN {old} TO {new}")
    op.execute(f"CREATE VIEW source_v AS {_SOURCE_V.format(column=new)}")


def upgrade() -> None:
    _rename("sha256", "content_hash")


def downgrade() -> None:
    # (BLAKE3 digests stay as they are: they have no sha256 form. A pre-0013 profdb does not recognise
    # those files when they are ingested again; its one-file-of-a-kind-per-rank check stops that ingest)
    _rename("content_hash", "sha256")
