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
"""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model, signals


@cache
def _plan(model: type[Model]) -> tuple[str, list[Field[Any, Any]]] | None:
    """The INSERT's text and its fields, in order; None when ``save()`` must write it."""
    meta = model._meta
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
    returning = meta.db_returning_fields
    if (
        meta.parents
        or meta.auto_field is None
        or returning != [meta.auto_field]
        or any(hasattr(f, "get_placeholder") for f in fields)
    ):
        return None
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f in fields)
    values = ", ".join(["%s"] * len(fields))
    key = quote(str(meta.auto_field.column))
    return (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({values}) RETURNING {key}",
        fields,
    )


def insert(obj: Model) -> None:
    """Write ``obj`` as a new row, as ``obj.save()`` would, and set its primary key."""
    model = type(obj)
    plan = _plan(model)
    if (
        plan is None
        or obj.pk is not None
        or signals.pre_save.has_listeners(model)
        or signals.post_save.has_listeners(model)
    ):
        obj.save()
        return
    sql, fields = plan
    # As save(): a related object must be saved, and its key is taken (Django's own step).
    cast(Any, obj)._prepare_related_fields_for_save(operation_name="save")
    values = [field.pre_save(obj, True) for field in fields]
    if any(hasattr(value, "resolve_expression") for value in values):
        obj.save()
        return
    params = [
        field.get_db_prep_save(v, connection) for field, v in zip(fields, values, strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        (obj.pk,) = cursor.fetchone()
    obj._state.adding = False
    obj._state.db = connection.alias
