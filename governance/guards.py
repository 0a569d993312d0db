"""Every request checked at the door, every error answered in the shape the client reads.

- ``RequestGuardMiddleware`` refuses, before any view or database work, a URL longer than
  ``MAX_URL_LENGTH`` (414), a NUL character in the path or the query string (400 naming
  the parameter: PostgreSQL text cannot hold one) and a body announced larger than
  ``MAX_BODY_BYTES`` (413).
- ``SafeJSONParser`` reads at most ``MAX_BODY_BYTES``, refuses JSON nested deeper than
  ``MAX_JSON_DEPTH`` and, in any string, NUL characters and lone surrogates (``\ud800``
  escapes that no character follows: not text PostgreSQL can store), naming the
  top-level field. A JSON field of a form or multipart body is text until DRF decodes
  it, after every parser: ``api.common.StorableJSONField`` holds it to the same rules
  (``json_value_problem``).
- ``ErrorPageMiddleware`` and the ``handler*`` views: under ``/api/`` every error is the
  JSON error shape (docs/data-model.md, ``{"field": ["message"]}``); on the web it is a
  page with the navigation that shows the reason the service gave.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import JSONParser

log = logging.getLogger(__name__)

NUL_MESSAGE = "must not contain NUL (\\u0000) characters"
SURROGATE_MESSAGE = (
    "must be valid Unicode text: a \\ud800-\\udfff escape must be half of a surrogate pair"
)


def _text_problem(text: str) -> str | None:
    """Why a string cannot be stored as text (a NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return NUL_MESSAGE
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE_MESSAGE
    return None


def _shown(key: str) -> str:
    """A refused key as the error names it (escapes where it holds what JSON cannot)."""
    return key.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    413: "Request too large",
    414: "Address too long",
    429: "Too many attempts",
    500: "Server error",
}


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def error_response(
    request: HttpRequest, status_code: int, errors: Mapping[str, list[str]]
) -> HttpResponse:
    """The error as JSON under /api/, else as the styled page (first message as reason)."""
    if is_api(request):
        return JsonResponse(dict(errors), status=status_code)
    reason = next((messages[0] for messages in errors.values() if messages), "")
    return error_page(request, status_code, reason)


def error_page(request: HttpRequest, status_code: int, reason: str) -> HttpResponse:
    """The web's error page: the navigation, what happened and the reason given."""
    try:
        return render(
            request,
            "errors/error.html",
            {
                "status": status_code,
                "title": TITLES.get(status_code, "Error"),
                "reason": reason,
            },
            status=status_code,
        )
    except Exception:  # the page itself failed (database down...): plain text, never a loop
        log.exception("error page for %s failed", status_code)
        return HttpResponse(
            f"{status_code} {TITLES.get(status_code, 'Error')}: {reason}",
            status=status_code,
            content_type="text/plain; charset=utf-8",
        )


class RequestGuardMiddleware:
    """Refuse malformed requests before anything reads them (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refusal = self.refusal(request)
        if refusal is not None:
            return error_response(request, refusal[0], refusal[1])
        return self.get_response(request)

    @staticmethod
    def refusal(request: HttpRequest) -> tuple[int, dict[str, list[str]]] | None:
        query = request.META.get("QUERY_STRING", "")
        if len(request.path) + len(query) > settings.MAX_URL_LENGTH:
            return 414, {
                "detail": [
                    f"The address is longer than {settings.MAX_URL_LENGTH} characters; "
                    "send long input in a request body."
                ]
            }
        if "\x00" in request.path:
            return 400, {"path": [f"the address {NUL_MESSAGE}"]}
        bad = sorted(
            {
                key.replace("\x00", "\\u0000")
                for key, values in request.GET.lists()
                if "\x00" in key or any("\x00" in value for value in values)
            }
        )
        if bad:
            return 400, {key: [NUL_MESSAGE] for key in bad}
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return 400, {"detail": ["Content-Length must be a number of bytes."]}
        if length > settings.MAX_BODY_BYTES:
            return 413, {"detail": [f"The body is larger than {settings.MAX_BODY_BYTES} bytes."]}
        return None


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The body is too large."


def json_value_problem(value: Any, max_depth: int) -> str | None:
    """Why a parsed JSON value is refused (a string that is not storable text, nesting too
    deep), or None.

    Iterative, so a deep value cannot exhaust the stack while it is checked.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return problem
        elif isinstance(item, dict | list):
            if depth > max_depth:
                return f"is nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    problem = _text_problem(key)
                    if problem:
                        return problem
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
    return None


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, bounded: body size, nesting depth, storable text only."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        if stream is None:
            return None
        raw = stream.read(settings.MAX_BODY_BYTES + 1)
        if len(raw) > settings.MAX_BODY_BYTES:
            raise PayloadTooLarge(f"The body is larger than {settings.MAX_BODY_BYTES} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(raw.decode(encoding))
        except RecursionError as exc:
            raise ParseError(
                f"JSON parse error - nested deeper than {settings.MAX_JSON_DEPTH} levels"
            ) from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        if isinstance(data, dict):
            errors = {}
            for key, child in data.items():
                problem = _text_problem(key) or json_value_problem(
                    child, settings.MAX_JSON_DEPTH - 1
                )
                if problem:
                    errors[_shown(key)] = [problem]
            if errors:
                raise ValidationError(errors)
        else:
            problem = json_value_problem(data, settings.MAX_JSON_DEPTH)
            if problem:
                raise ValidationError({"detail": [f"the body {problem}"]})
        return data


class ErrorPageMiddleware:
    """Turn the web's bare error responses (``HttpResponseForbidden("why")``, Django's
    empty 405) into the styled page that keeps the navigation and shows that reason.

    HTMX requests keep the bare answer: they swap it into a region of a page that
    already has its navigation. Under /api/ a bare error becomes the JSON shape.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or response.streaming:
            return response
        content_type = response.get("Content-Type", "")
        if is_api(request):
            if content_type.startswith("application/json"):
                return response
            reason = _bare_reason(response) or TITLES.get(response.status_code, "Error")
            new = JsonResponse({"detail": [reason]}, status=response.status_code)
            if response.has_header("Allow"):
                new["Allow"] = response["Allow"]
            return new
        if request.headers.get("HX-Request") or getattr(response, "styled_error", False):
            return response
        if not content_type.startswith("text/") or b"<html" in response.content[:512].lower():
            return response
        styled = error_page(request, response.status_code, _bare_reason(response))
        if response.has_header("Allow"):
            styled["Allow"] = response["Allow"]
        return styled


def _bare_reason(response: HttpResponse) -> str:
    return response.content.decode(response.charset or "utf-8", "replace").strip()[:500]


# Django's handler400/403/404/500 (set in governance.urls).


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 400, {"detail": [str(exception or "") or "Bad request."]})


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(
        request, 403, {"detail": [str(exception or "") or "You may not do this."]}
    )


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = str(exception or "")
    # Django's resolver puts a dict in the message when no route matched; say it plainly.
    if not reason or reason.startswith("{"):
        reason = f"Nothing is at {request.path}."
    return error_response(request, 404, {"detail": [reason]})


def server_error(request: HttpRequest) -> HttpResponse:
    return error_response(
        request,
        500,
        {"detail": ["Something went wrong on our side; it has been logged. Try again later."]},
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: the form was older than the session or came from elsewhere."""
    return error_response(
        request,
        403,
        {"detail": ["The form expired or came from another site: reload the page and retry."]},
    )


def locked_out(request: HttpRequest, credentials: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``AXES_LOCKOUT_CALLABLE``: the lockout answered in the shape the client reads."""
    return error_response(request, 429, {"detail": [lockout_message()]})


def lockout_message() -> str:
    minutes = settings.AXES_COOLOFF_TIME.total_seconds() / 60
    return (
        "Too many failed sign-ins for this username from your address: try again in "
        f"{minutes:g} minutes, or reset your password."
    )
