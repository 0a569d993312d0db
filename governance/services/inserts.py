"""New rows written by an INSERT whose text is built once per model.

``Model.objects.create`` compiles its INSERT anew each time: for a job's thirty-odd
columns that is about 0.4 ms of CPU, and a submission writes three rows (the job, its
event, its audit entry). ``insert`` writes the same row with the same values: each field's
``pre_save`` (defaults, ``auto_now``) and ``get_db_prep_save`` (JSON, decimals) as the
ORM's compiler applies them, the primary key read back and the instance marked saved. It
hands to ``save()`` whatever it does not cover: a model with a ``pre_save`` or
``post_save`` receiver (none of those it writes has one), an instance with a primary
key already, a value that is an expression, a model with inherited parents, a field with
its own placeholder or columns filled by the database.

``insert_many`` does the same for ``bulk_create``: a cycle writes an event and an audit
entry for each job it admits or completes, and the ORM's compiler cost more per row than
PostgreSQL spent writing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model, signals

# Rows per statement of ``insert_many``: PostgreSQL takes at most 65,535 parameters.
MANY_ROWS = 500


@cache
def _fields(model: type[Model]) -> list[Field[Any, Any]] | None:
    """The fields an INSERT writes, in order; None when the ORM must write the model."""
    meta = model._meta
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
    if (
        meta.parents
        or meta.auto_field is None
        or meta.db_returning_fields != [meta.auto_field]
        or any(hasattr(f, "get_placeholder") for f in fields)
        or len(fields) * MANY_ROWS > 65_535
    ):
        return None
    return fields


@lru_cache(maxsize=256)
def _statement(model: type[Model], rows: int) -> str:
    """The INSERT of ``rows`` rows of ``model`` (``_fields``), returning their keys."""
    fields = cast("list[Field[Any, Any]]", _fields(model))
    quote = connection.ops.quote_name
    meta = model._meta
    columns = ", ".join(quote(str(f.column)) for f in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    key = quote(str(cast(Any, meta.auto_field).column))
    values = ", ".join([row] * rows)
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES {values} RETURNING {key}"


def _params(obj: Model, fields: list[Field[Any, Any]], operation: str) -> list[Any] | None:
    """``obj``'s values as the ORM's compiler sends them; None when one is an expression
    (the ORM writes it). As the ORM does first: a related object must be saved, and its
    key is taken."""
    cast(Any, obj)._prepare_related_fields_for_save(operation_name=operation)
    values = [field.pre_save(obj, True) for field in fields]
    if any(hasattr(value, "resolve_expression") for value in values):
        return None
    return [field.get_db_prep_save(v, connection) for field, v in zip(fields, values, strict=True)]


def _saved(obj: Model, pk: Any) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def insert(obj: Model) -> None:
    """Write ``obj`` as a new row, as ``obj.save()`` would, and set its primary key."""
    model = type(obj)
    fields = _fields(model)
    if (
        fields is None
        or obj.pk is not None
        or signals.pre_save.has_listeners(model)
        or signals.post_save.has_listeners(model)
        or (params := _params(obj, fields, "save")) is None
    ):
        obj.save()
        return
    with connection.cursor() as cursor:
        cursor.execute(_statement(model, 1), params)
        _saved(obj, cursor.fetchone()[0])


def insert_many(objs: Sequence[Model]) -> None:
    """Write ``objs``, new instances of one model, as ``bulk_create(objs)`` would: in their
    order, without signals (``bulk_create`` sends none), each primary key set."""
    if not objs:
        return
    model = type(objs[0])
    fields = _fields(model)
    if fields is None or any(type(obj) is not model or obj.pk is not None for obj in objs):
        model._default_manager.bulk_create(objs)
        return
    params: list[Any] = []
    for obj in objs:
        values = _params(obj, fields, "bulk_create")
        if values is None:
            model._default_manager.bulk_create(objs)
            return
        params.extend(values)
    width = len(fields)
    with connection.cursor() as cursor:
        for start in range(0, len(objs), MANY_ROWS):
            batch = objs[start : start + MANY_ROWS]
            cursor.execute(
                _statement(model, len(batch)), params[start * width : (start + len(batch)) * width]
            )
            # PostgreSQL returns an INSERT ... VALUES's rows in the order given (bulk_create
            # relies on it too)
            for obj, (pk,) in zip(batch, cursor.fetchall(), strict=True):
                _saved(obj, pk)
