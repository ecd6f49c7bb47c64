"""What a profile's values must be, written so that importing the schema imports no pydantic.

The schema's classes are plain dataclasses; pydantic validates a profile the first time it is
read (catalog.py) and the result is kept (profile_cache.py). The constraints in their
annotations stand for pydantic's and annotated_types' own metadata, which is made only when
pydantic builds its validator: a command that reads a profile it has seen before imports
neither, and building the validator would cost it more than the rest of its work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

Value = TypeVar("Value")


class Section:
    """A TOML table of the schema: a key that its class does not name is an error."""

    __slots__ = ()
    # pydantic's configuration of a standard dataclass (ConfigDict is a TypedDict).
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}


@dataclass(frozen=True, slots=True)
class Constraint:
    """Metadata in `Annotated[type, ...]`: pydantic applies `make()`'s metadata to the type."""

    make: Callable[[], object]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return handler(Annotated[source, self.make()])


def greater_than(bound: float) -> Constraint:
    """More than `bound`: pydantic says "Input should be greater than 0"."""

    def make() -> object:
        from annotated_types import Gt

        return Gt(bound)

    return Constraint(make)


def at_least(bound: float) -> Constraint:
    """`bound` or more."""

    def make() -> object:
        from annotated_types import Ge

        return Ge(bound)

    return Constraint(make)


def not_empty() -> Constraint:
    """At least one item."""

    def make() -> object:
        from annotated_types import MinLen

        return MinLen(1)

    return Constraint(make)


def checked_by(check: Callable[[Value], Value]) -> Constraint:
    """`check(value)` returns the value or raises ValueError, whose message names the problem
    (reported at this field)."""

    def make() -> object:
        from pydantic import AfterValidator

        return AfterValidator(check)

    return Constraint(make)


def tagged_by(key: str) -> Constraint:
    """A union of classes told apart by their `key` field (a Literal): an error then names the
    fields of the class the value chose, not those of every class."""

    def make() -> object:
        from pydantic import Discriminator

        return Discriminator(key)

    return Constraint(make)


PositiveInt = Annotated[int, greater_than(0)]
PositiveFloat = Annotated[float, greater_than(0)]
