"""What the server's pg_claim offers, read from pg_catalog once per connection
target. Older extension versions lack some functions or arguments; callers
check a flag and either fall back or raise NotSupported."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, List, Sequence, Tuple

from .errors import NotInstalled, NotSupported

FEATURES_SQL = """
SELECT p.proname::text,
       coalesce(p.proargnames, '{}'::text[]),
       p.proargtypes::regtype[]::text[]
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'claim'
"""


@dataclass(frozen=True)
class Features:
    """Functions (and their argument names and types) of schema ``claim``."""

    functions: Dict[str, Tuple[Tuple[Tuple[str, ...], Tuple[str, ...]], ...]] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]]) -> "Features":
        funcs: Dict[str, List[Tuple[Tuple[str, ...], Tuple[str, ...]]]] = {}
        for name, argnames, argtypes in rows:
            funcs.setdefault(name, []).append((tuple(argnames or ()), tuple(argtypes or ())))
        if not funcs:
            raise NotInstalled("schema claim has no functions: run CREATE EXTENSION pg_claim in this database")
        return cls({k: tuple(v) for k, v in funcs.items()})

    def has(self, name: str) -> bool:
        return name in self.functions

    def has_arg(self, name: str, arg: str) -> bool:
        return any(arg in names for names, _ in self.functions.get(name, ()))

    def has_signature(self, name: str, types: Sequence[str]) -> bool:
        want = tuple(types)
        return any(t == want for _, t in self.functions.get(name, ()))

    @property
    def complete_result(self) -> bool:
        """``complete(token bigint, result jsonb)`` exists."""
        return self.has_signature("complete", ("bigint", "jsonb"))

    @property
    def claim_done(self) -> bool:
        """``claim_next(..., done bigint[])`` exists."""
        return self.has_arg("claim_next", "done")

    @property
    def names(self) -> FrozenSet[str]:
        return frozenset(self.functions)

    def require(self, name: str, arg: str = "") -> None:
        """Raise NotSupported unless the function (and argument) exists."""
        if not self.has(name):
            raise NotSupported(f"this server's pg_claim has no claim.{name}(); update the extension "
                               f"(ALTER EXTENSION pg_claim UPDATE)")
        if arg and not self.has_arg(name, arg):
            raise NotSupported(f"this server's claim.{name}() has no argument {arg!r}; update the "
                               f"extension (ALTER EXTENSION pg_claim UPDATE)")
