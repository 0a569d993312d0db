"""Models built from one statement's row, for the few reads that every request makes.

The ORM compiles a query's SQL anew at each use: for a query joining three tables with
two subqueries that is about 1 ms of CPU, more than PostgreSQL spends answering it. The
reads on every submission and every API request instead run a statement whose text is
built once from the models' own column lists, and build the models from its row as the
ORM does (``Model.from_db``). That is only right for models whose fields take the
database's value as it comes (no ``from_db_value`` conversion); the tests of each read
compare it with the ORM's, field for field.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
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
    names = [field.attname for field in model._meta.concrete_fields]
    return model.from_db(connection.alias, names, values)
