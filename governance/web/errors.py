"""Service errors on forms: each message beside its field, the rest above the form."""

from __future__ import annotations

from django import forms

from governance.services.errors import ServiceError


def apply_service_errors(form: forms.Form, exc: ServiceError) -> None:
    """Put each message of a service error beside its field; keys the form has no field
    for become non-field errors, prefixed with the key when it names a field (so "limits:
    ..." still says what it is about)."""
    for field, messages in exc.errors.items():
        target = field if field in form.fields else None
        for message in messages:
            if target is None and field not in ("non_field_errors", "detail"):
                message = f"{field}: {message}"
            form.add_error(target, message)
