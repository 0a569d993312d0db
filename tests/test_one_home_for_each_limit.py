"""One home for each limit (docs/architecture.md#one-home-for-each-rule): a form or a
serializer never writes a bound as a number. Its lengths and ranges name the constant
the service (or the model column) checks, so the page, the API and the service cannot
drift apart (a form that allowed 365 days while the service allowed 366 would report
its own rule, then the service's, in rounds).

Read with ``ast``: every ``max_length=``, ``max_value=`` and ``min_value=`` argument in
``governance/web/forms_*.py`` and ``governance/api/*.py`` must be a name, not a literal.
The floors 0 and 1 ("none or more", "at least one") are the only literals allowed, as a
``min_value``. (A decimal's ``max_digits``/``decimal_places`` describe how a price is
written, not a rule, and are not held here yet.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django import forms

from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY
from governance.services.agreements import MAX_NOTE, TITLE_MAX_LENGTH
from governance.services.promises import MAX_WINDOW_DAYS
from governance.web import forms_governance

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(
    [*(ROOT / "governance" / "web").glob("forms_*.py"), *(ROOT / "governance" / "api").glob("*.py")]
)
BOUNDS = ("max_length", "max_value", "min_value")
FLOORS = (0, 1)


def _is_literal(node: ast.expr) -> bool:
    """A number written out (``9999``, ``2**31 - 1``, ``-1``): no name in it."""
    return all(not isinstance(n, ast.Name | ast.Attribute | ast.Call) for n in ast.walk(node))


def _literal_bounds(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg not in BOUNDS or not _is_literal(keyword.value):
                continue
            value = keyword.value
            floor = isinstance(value, ast.Constant) and value.value in FLOORS
            if keyword.arg == "min_value" and floor:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            found.append(f"{where} {keyword.arg}={ast.unparse(value)}")
    return found


def test_the_files_are_read() -> None:
    assert len(FILES) > 10


def test_no_form_or_serializer_writes_a_bound_as_a_number() -> None:
    found = [line for path in FILES for line in _literal_bounds(path)]
    assert found == [], "Name the service's (or the column's) constant instead:\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    ("form", "field", "bounds"),
    [
        (forms_governance.ExceptionFileForm, "priority", (MIN_PRIORITY, MAX_PRIORITY)),
        (forms_governance.PriorityDefinitionForm, "min_priority", (MIN_PRIORITY, MAX_PRIORITY)),
        (forms_governance.PriorityDefinitionForm, "max_priority", (MIN_PRIORITY, MAX_PRIORITY)),
        (forms_governance.AgreementForm, "promise_window_days", (1, MAX_WINDOW_DAYS)),
    ],
)
def test_number_inputs_hint_the_services_range_and_leave_the_check_to_it(
    form: type[forms.Form], field: str, bounds: tuple[int, int]
) -> None:
    """The browser's hint is the service's range; the form itself does not check it (the
    service does, in words, with the other problems of the same submit)."""
    declared = form.base_fields[field]
    assert (declared.widget.attrs["min"], declared.widget.attrs["max"]) == bounds
    assert not declared.validators


def test_text_lengths_are_the_services() -> None:
    fields = forms_governance.AgreementForm.base_fields
    assert getattr(fields["title"], "max_length", None) == TITLE_MAX_LENGTH
    note = forms_governance.ReviewForm.base_fields["note"]
    assert getattr(note, "max_length", None) == MAX_NOTE
