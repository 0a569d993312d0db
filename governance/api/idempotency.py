"""``@idempotent``: the ``Idempotency-Key`` header on the API's creating endpoints.

Put it on a viewset's ``create`` (below ``@extend_schema``)::

    @extend_schema(request=..., responses={201: ...})
    @idempotent
    def create(self, request, ...): ...

Without the header nothing changes. With it, the view runs in one transaction with the
key's reservation (governance/services/idempotency.py has the rules and why they hold):
a retry of the same request within 24 h gets the first answer again, marked with the
``Idempotent-Replayed: true`` header, and creates nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from governance.services import idempotency

REPLAYED_HEADER = "Idempotent-Replayed"

IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    name=idempotency.HEADER,
    type=str,
    location=OpenApiParameter.HEADER,
    required=False,
    description=(
        "A key of your choosing (1-255 printable ASCII characters, e.g. a UUID), unique "
        "per object you mean to create once, so the request can be retried safely: the "
        "same key with the same body within 24 h returns the first answer (status and "
        "body, with the header `Idempotent-Replayed: true`) and creates nothing new, even "
        "when both arrive at once. The same key with a different body, or on another "
        "endpoint, is a 409 naming this header. Keys are per user. Only successful answers "
        "are kept: a request that failed changed nothing and may be sent again as it is."
    ),
)

View = TypeVar("View", bound=Callable[..., Response])


def idempotent(view: View) -> View:
    """Honour ``Idempotency-Key`` on a creating view method (``create`` of a viewset)."""

    @functools.wraps(view)
    def wrapper(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        key = request.headers.get(idempotency.HEADER)
        if key is None:
            return view(self, request, *args, **kwargs)
        endpoint = f"{request.method} {request.path}"
        fingerprint = idempotency.fingerprint(endpoint=endpoint, body=_plain(request.data))
        with transaction.atomic():
            stored = idempotency.idempotency_claim(
                actor=request.user, key=key, endpoint=endpoint, fingerprint=fingerprint
            )
            if stored is not None:
                replay = Response(stored.body, status=stored.status)
                replay[REPLAYED_HEADER] = "true"
                return replay
            # An exception here rolls the reservation back with whatever the view did.
            response = view(self, request, *args, **kwargs)
            if status.is_success(response.status_code):
                idempotency.idempotency_record(
                    actor=request.user, key=key, status=response.status_code, body=response.data
                )
            else:
                transaction.set_rollback(True)
            return response

    return cast(View, extend_schema(parameters=[IDEMPOTENCY_KEY_PARAMETER])(wrapper))


def _plain(data: Any) -> Any:
    """The parsed body as plain JSON values (a form body is a QueryDict of lists)."""
    if hasattr(data, "lists"):
        return {name: values for name, values in data.lists()}
    return data
