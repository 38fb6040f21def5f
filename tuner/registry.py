"""Name → factory tables for the extension points (samplers, executors, estimators, report formats).

As GuideLLM does for its backends and vLLM's sweep for its subcommands: adding a strategy is adding
one entry, and an unknown name is an input error that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tuner.errors import InputError

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    def __init__(self, kind: str):
        self.kind = kind  # what an entry is, for error messages ("sampler", "executor", ...)
        self._entries: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@SAMPLERS.register("tpe")`` over the factory."""
        def add(factory: F) -> F:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = factory
            return factory
        return add

    def get(self, name: str) -> F:
        try:
            return self._entries[name]
        except KeyError:
            raise InputError(f"unknown {self.kind} {name!r}; choose one of "
                             f"{', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
