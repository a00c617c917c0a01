"""Bounded tables that forget their least recently used entries first: the memory the proxy's
run resolver and compaction watch keep of recent calls (:class:`LRU`), and what the capture
remembers of the objects an import's requests share (:class:`ObjectMemo`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LRU", "ObjectMemo"]

K = TypeVar("K")
T = TypeVar("T")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``limit`` entries; setting one makes it the most recent, and so does
    :meth:`touch` (a plain :meth:`get` does not)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def touch(self, key: K) -> V | None:
        """The entry, made the most recent; None when there is none."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)


class ObjectMemo(Generic[V]):
    """What was computed of an object, remembered by the object itself (its identity: a dict or
    a list cannot be a key), at most ``limit`` of them, the least recently used forgotten first.
    The entry holds the object, so its id is not reused while remembered. Only for objects
    nobody changes in place: ``ctxkit import``'s readers hand every request of a session the
    same message objects it repeats, and never change them."""

    def __init__(self, limit: int) -> None:
        self._entries: LRU[int, tuple[object, V]] = LRU(limit)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: T, compute: Callable[[T], V]) -> V:
        """The value remembered for ``obj``, else ``compute(obj)``, remembered."""
        entry = self._entries.touch(id(obj))
        if entry is not None and entry[0] is obj:
            return entry[1]
        value = compute(obj)
        self._entries.put(id(obj), (obj, value))
        return value
