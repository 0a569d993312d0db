"""Per-instance-type counts (queue capacity, share limits) written as one map."""

from __future__ import annotations

from typing import Any

from django.db import models

from governance.models import InstanceType


def write_type_counts(
    model: type[models.Model], owner: str, owner_obj: models.Model, counts: dict[InstanceType, int]
) -> None:
    """Make ``model``'s rows of ``owner_obj`` equal ``counts``: the map replaces them all.

    Rows are updated in place (not deleted and re-created) so that ids stay stable.
    """
    rows: Any = model._default_manager.filter(**{owner: owner_obj})
    existing = {row.instance_type_id: row for row in rows}
    wanted = {itype.pk: count for itype, count in counts.items()}
    for type_id, row in existing.items():
        if type_id not in wanted:
            row.delete()
        elif row.count != wanted[type_id]:
            row.count = wanted[type_id]
            row.save(update_fields=["count"])
    model._default_manager.bulk_create(
        model(**{owner: owner_obj, "instance_type_id": type_id, "count": count})
        for type_id, count in wanted.items()
        if type_id not in existing
    )
