"""Service errors on forms: each message beside its field, the rest above the form.

Every problem at once: a form only parses what was typed (numbers, dates, choices); the
rules are the service's, the same the API applies. When parsing already failed for some
fields, ``check_with_service`` still asks the service about the others, so a form never
reports its problems in rounds (a count first, the duplicate name only after).
"""

from __future__ import annotations

from collections.abc import Callable

from django import forms
from django.db import transaction

from governance.services.errors import ServiceError


def field_words(form: forms.Form, field: str) -> str:
    """How the page names a field the form has no input for: its label when the form has
    the field, else the key in words ("hourly_price" -> "Hourly price")."""
    if field in form.fields and form.fields[field].label:
        return str(form.fields[field].label)
    return field.replace("_", " ").replace(".", " ").strip().capitalize()


def apply_service_errors(form: forms.Form, exc: ServiceError) -> None:
    """Put each message of a service error beside its field; keys the form has no field
    for become non-field errors, prefixed with the field's name in words (so "Limits:
    ..." still says what it is about)."""
    for field, messages in exc.errors.items():
        target = field if field in form.fields else None
        for message in messages:
            if target is None and field not in ("non_field_errors", "detail"):
                message = f"{field_words(form, field)}: {message}"
            form.add_error(target, message)


class _DryRun(Exception):
    """Ends a service call made only for its checks (rolls its transaction back)."""


def check_with_service(
    form: forms.Form,
    call: Callable[[], object],
    apply: Callable[[ServiceError], None] | None = None,
    field_of: Callable[[str], str | None] | None = None,
) -> None:
    """The form found problems while parsing: still run the service's rules on what did
    parse (``call``, the values of fields that failed given as None), inside a
    transaction that is always rolled back, so nothing is stored, audited or announced
    (announcements wait for a commit). Its messages go beside the fields the form had
    nothing to say about (``apply``: the form's own way of placing them). ``field_of``
    names the form field a service key is about when the two differ (an agreement's
    ``promises[0].threshold`` is its ``promise_threshold``; None: no field), so those
    messages come in the same answer. Messages about keys that are not fields of the
    form are left for the round where everything parsed: they may stem from a value
    that did not."""
    try:
        with transaction.atomic():
            call()
            raise _DryRun
    except (_DryRun, TypeError, ValueError, KeyError):
        # Done, or the call could not be made from what parsed: the rest is said in
        # the round where everything parses.
        return
    except ServiceError as exc:
        # Only messages about the form's own fields: one about a key it has no input
        # for (a share's queue) may stem from a field that did not parse.
        about_fields: dict[str, list[str]] = {}
        for key, messages in exc.errors.items():
            field = field_of(key) if field_of is not None else key
            if field is not None and field in form.fields and field not in form.errors:
                about_fields.setdefault(field, []).extend(messages)
        exc.errors = about_fields
        (apply or (lambda e: apply_service_errors(form, e)))(exc)
