"""OpenAPI post-processing: the error answers every operation can give, documented once.

Any request can be refused before its view runs (401 without credentials, 403, 413 for
a large body, 414 for a long address, 429 when throttled) or by it (400 naming fields,
404, 405); the schema says so for every operation, with the error shape of
docs/data-model.md, so clients and the schema fuzzer know what to expect.
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA = {
    "type": "object",
    "description": (
        'One key per field in error (or "detail", "non_field_errors"), each with its '
        'messages; a 409 adds "current", the stored object as it is now.'
    ),
    "properties": {"current": {"type": "object", "additionalProperties": True}},
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}

ERRORS = {
    "400": "The input breaks a rule or has the wrong type: every field in error is named.",
    "401": "No credentials, or a token that expired or was revoked.",
    "403": "Not allowed for your role, or a lockout.",
    "404": "No such object.",
    "405": "Method not allowed here.",
    "409": "The object changed since you read it (stale version), or the run is over.",
    "413": "The body is too large.",
    "414": "The address is too long.",
    "429": "Too many requests: wait and retry.",
}
ALWAYS = ("400", "401", "403", "404", "405", "413", "414", "429")
WRITES = ("post", "put", "patch", "delete")


# Lists that also answer a plain array of every matching item (``?format=json``): their
# JSON 200 is the page or that array.
EXPORTS = {"/api/audit/": "AuditEntry"}


def add_exports(result: dict[str, Any]) -> None:
    for path, component in EXPORTS.items():
        operation = result.get("paths", {}).get(path, {}).get("get")
        if operation is None:
            continue
        content = operation["responses"]["200"]["content"]["application/json"]
        item = {"$ref": f"#/components/schemas/{component}"}
        content["schema"] = {
            "oneOf": [
                content["schema"],
                {
                    "type": "array",
                    "items": item,
                    "description": "With ?format=json: every matching entry, not one page.",
                },
            ]
        }


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``: add the error responses (and the
    export shape of ``EXPORTS``)."""
    add_exports(result)
    components = result.setdefault("components", {})
    components.setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            codes = [*ALWAYS, "409"] if method in WRITES else list(ALWAYS)
            responses = operation["responses"]
            for code in codes:
                if code not in responses:
                    responses[code] = {
                        "description": ERRORS[code],
                        "content": {"application/json": {"schema": ref}},
                    }
    return result
