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

``insert_together`` writes the rows of several models in one statement, so in one round
trip and, outside a transaction, as one transaction of their own: a submission's job,
event and audit entry cost seven round trips to PostgreSQL with ``BEGIN`` and ``COMMIT``,
and three of those are left.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Field, Model, signals

from governance import prepared

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
def _statement(model: type[Model], rows: int, keyed: bool = False) -> str:
    """The INSERT of ``rows`` rows of ``model`` (``_fields``, after the key when ``keyed``:
    the rows come with theirs), returning their keys."""
    fields = cast("list[Field[Any, Any]]", _fields(model))
    quote = connection.ops.quote_name
    meta = model._meta
    key = quote(str(cast(Any, meta.auto_field).column))
    columns = ", ".join(([key] if keyed else []) + [quote(str(f.column)) for f in fields])
    row = "(" + ", ".join(["%s"] * (len(fields) + keyed)) + ")"
    values = ", ".join([row] * rows)
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES {values} RETURNING {key}"


@lru_cache(maxsize=64)
def _together(parts: tuple[tuple[type[Model], int, bool], ...]) -> str:
    """One statement of the INSERTs ``parts`` describes (model, rows, keyed), returning
    each part's keys as an array, in the order of its rows."""
    inserts = ", ".join(f"i{n} AS ({_statement(*part)})" for n, part in enumerate(parts))
    arrays = ", ".join(f"ARRAY(SELECT * FROM i{n})" for n in range(len(parts)))
    return f"WITH {inserts} SELECT {arrays}"


def _params(obj: Model, fields: list[Field[Any, Any]], operation: str) -> list[Any] | None:
    """``obj``'s values as the ORM's compiler sends them; None when one is an expression
    (the ORM writes it). As the ORM does first: a related object must be saved, and its
    key is taken."""
    cast(Any, obj)._prepare_related_fields_for_save(operation_name=operation)
    values = [field.pre_save(obj, True) for field in fields]
    if any(hasattr(value, "resolve_expression") for value in values):
        return None
    # The thread's connection itself, not the ``connection`` proxy: each of the proxy's
    # attribute reads looks the connection up again (a context-local), and a submission's
    # rows have some 60 values.
    db = connections[DEFAULT_DB_ALIAS]
    return [field.get_db_prep_save(v, db) for field, v in zip(fields, values, strict=True)]


def _saved(obj: Model, pk: Any) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def _plain(model: type[Model]) -> list[Field[Any, Any]] | None:
    """The fields ``insert`` writes of ``model``; None when ``save()`` must (it has
    fields ``_fields`` leaves to the ORM, or receivers of ``save``'s signals)."""
    fields = _fields(model)
    if fields is None or signals.pre_save.has_listeners(model):
        return None
    return None if signals.post_save.has_listeners(model) else fields


def insert(obj: Model) -> None:
    """Write ``obj`` as a new row, as ``obj.save()`` would, and set its primary key."""
    fields = _plain(type(obj))
    if fields is None or obj.pk is not None or (params := _params(obj, fields, "save")) is None:
        obj.save()
        return
    with prepared.cursor() as cursor:
        cursor.execute(_statement(type(obj), 1), params)
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
    with prepared.cursor() as cursor:
        for start in range(0, len(objs), MANY_ROWS):
            batch = objs[start : start + MANY_ROWS]
            cursor.execute(
                _statement(model, len(batch)), params[start * width : (start + len(batch)) * width]
            )
            # PostgreSQL returns an INSERT ... VALUES's rows in the order given (bulk_create
            # relies on it too)
            for obj, (pk,) in zip(batch, cursor.fetchall(), strict=True):
                _saved(obj, pk)


def insert_together(objs: Sequence[Model]) -> None:
    """Write ``objs``, new instances of one or more models, as ``insert`` writes each, in
    one statement: all of them or, when it fails, none, inside a transaction or not. An
    instance may come with its primary key (taken from its sequence beforehand, so that the
    rows after it can name it). Consecutive instances of a model are one multi-row INSERT,
    in their order; the INSERTs of different models run in no set order, so a trigger must
    not depend on it (foreign keys are checked at the statement's end, or at commit).

    When ``insert`` would hand one of them to ``save()``, or one names another that has
    no key yet, each is saved in turn instead, in a transaction."""
    parts: list[tuple[type[Model], int, bool]] = []
    params: list[Any] = []
    for obj in objs:
        model, keyed = type(obj), obj.pk is not None
        fields = _plain(model)
        try:
            values = _params(obj, fields, "save") if fields is not None else None
        except ValueError:  # it names an instance of ``objs`` that has no key yet
            values = None
        if values is None:
            with transaction.atomic():
                for each in objs:
                    each.save(force_insert=True)
            return
        params.extend([obj.pk, *values] if keyed else values)
        if parts and parts[-1][0] is model and parts[-1][2] == keyed:
            parts[-1] = (model, parts[-1][1] + 1, keyed)
        else:
            parts.append((model, 1, keyed))
    if not parts:
        return
    with prepared.cursor() as cursor:
        cursor.execute(_together(tuple(parts)), params)
        keys = cast("tuple[list[Any], ...]", cursor.fetchone())
    at = 0
    for (_, rows, _), part_keys in zip(parts, keys, strict=True):
        for obj, pk in zip(objs[at : at + rows], part_keys, strict=True):
            _saved(obj, pk)
        at += rows
