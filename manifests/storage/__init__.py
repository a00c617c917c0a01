"""Storage lifecycle: daily partitions on PostgreSQL (``partitions``) and retention by dropping
them, or by deleting rows elsewhere (``retention``)."""
