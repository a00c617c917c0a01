"""Building a context: tokens, grouping, the allocator, operators, layout, compaction, read-back, handoff."""
