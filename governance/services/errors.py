"""Errors every service raises; the API and the forms turn them into field-keyed messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class ServiceError(Exception):
    """Base: ``errors`` maps a field name (or ``non_field_errors``) to messages."""

    status = 400

    def __init__(self, errors: Mapping[str, Sequence[str] | str] | str) -> None:
        if isinstance(errors, str):
            errors = {"non_field_errors": [errors]}
        self.errors: dict[str, list[str]] = {
            field: [messages] if isinstance(messages, str) else list(messages)
            for field, messages in errors.items()
        }
        super().__init__(self.errors)


class ValidationFailed(ServiceError):
    """The input breaks a rule; nothing was written."""

    status = 400


class PermissionDenied(ServiceError):
    """The actor may not do this."""

    status = 403


class NotFound(ServiceError):
    status = 404


class TooMany(ServiceError):
    """The actor already has as many of these in progress as allowed; try again later."""

    status = 429


class Conflict(ServiceError):
    """The object changed since the caller read it (stale ``version``).

    ``current`` (optional) is the stored object as the API shows it, so the caller can
    see what changed and retry on top of it; the API adds it to the body as ``current``.
    """

    status = 409

    def __init__(
        self, errors: Mapping[str, Sequence[str] | str] | str, current: object = None
    ) -> None:
        super().__init__(errors)
        self.current = current


class Errors:
    """Collects every problem of an input before raising, so a user sees them all at once."""

    def __init__(self) -> None:
        self._errors: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self._errors.setdefault(field, []).append(message)

    def __bool__(self) -> bool:
        return bool(self._errors)

    def fields(self) -> set[str]:
        return set(self._errors)

    def messages(self, field: str) -> list[str]:
        """The messages collected for ``field`` (to re-key them under another field)."""
        return list(self._errors.get(field, []))

    def raise_if_any(self) -> None:
        if self._errors:
            raise ValidationFailed(self._errors)
