"""A named registry whose built-in entries are registered by packages imported on first use."""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> entry. Registration is loud (a name taken twice raises ValueError); the modules in ``builtin``
    register theirs when the registry is first read, so its readers need not import them."""

    def __init__(self, what: str, builtin: tuple[str, ...] = ()) -> None:
        self.what, self.builtin = what, builtin
        self._entries: dict[str, T] = {}
        self._loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # first: a built-in module registering its entries reads the registry too
            for module in self.builtin:
                importlib.import_module(module)

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` as ``name`` (the built-in entries loaded first, so a clash with one is refused too)."""
        self._load()
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        self._entries.pop(name, None)

    def get(self, name: str) -> T | None:
        """The entry of ``name`` (None if none), the built-in ones loaded."""
        self._load()
        return self._entries.get(name)

    def entries(self) -> dict[str, T]:
        """Every entry by name, the built-in ones loaded (a copy)."""
        self._load()
        return dict(self._entries)
