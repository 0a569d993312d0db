"""Models built from one statement's row, for the few reads that every request makes.

The ORM compiles a query's SQL anew at each use: for a query joining three tables with
two subqueries that is about 1 ms of CPU, more than PostgreSQL spends answering it. The
reads on every submission and every API request instead run a statement whose text is
built once from the models' own column lists, and build the models from its row as the
ORM does (``Model.from_db``), each value through its field's ``from_db_value`` where it
has one (JSON arrives as text). The tests of each read compare it with the ORM's, field
for field.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model


def columns(model: type[Model], alias: str) -> str:
    """The model's columns, in its fields' order, qualified by ``alias``."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


def table(model: type[Model]) -> str:
    return f'"{model._meta.db_table}"'


def width(model: type[Model]) -> int:
    """How many values of a row ``columns(model, ...)`` takes."""
    return len(model._meta.concrete_fields)


def built(model: type[Model], values: tuple[Any, ...] | list[Any]) -> Any:
    """An instance of ``model`` as the ORM builds it from these values (those of
    ``columns(model, ...)``, in order): not adding, from this database."""
    names, converters = _reading(model)
    if converters:
        values = list(values)
        db = connections[DEFAULT_DB_ALIAS]  # not the proxy: one context-local look-up
        for at, convert in converters:
            values[at] = convert(values[at], None, db)
    return model.from_db(DEFAULT_DB_ALIAS, names, values)


@cache
def _reading(model: type[Model]) -> tuple[list[str], list[tuple[int, Any]]]:
    """The model's attribute names, in column order, and the conversions its fields make
    of a database value (by position)."""
    fields = model._meta.concrete_fields
    converters = [
        (at, field.from_db_value)
        for at, field in enumerate(fields)
        if hasattr(field, "from_db_value")
    ]
    return [field.attname for field in fields], converters
