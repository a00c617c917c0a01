"""Helpers of the tests that migrate the test database back to before a migration, store rows
with the models of that time, and migrate forward."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

APP = "manifests"
Node = tuple[str, str]


def migrate(targets: list[Node]) -> MigrationExecutor:
    """Migrate to ``targets``; a fresh executor, whose loader knows the new state."""
    MigrationExecutor(connection).migrate(targets)
    return MigrationExecutor(connection)


def around(suffix: str) -> tuple[Node, Node, list[Node]]:
    """(the migration named ``*suffix``, the one before it, the leaves to return to), found by
    name so a renumbering keeps the tests."""
    graph = MigrationExecutor(connection).loader.graph
    (node,) = [key for key in graph.nodes if key[0] == APP and key[1].endswith(suffix)]
    (previous,) = [p for p in graph.node_map[node].parents if p[0] == APP]
    return node, previous, graph.leaf_nodes()
