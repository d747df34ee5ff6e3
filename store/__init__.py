"""profdb's library: schema, readers, rank identity, ingest and queries."""
