"""The job page's words about a preference template (docs/workloads.md#preference-templates):
which template entry the job's run was chosen from, and why it stands there."""

from __future__ import annotations

from typing import Any

from django import template

from governance.selectors.certifications import template_entry_of

register = template.Library()


@register.filter
def template_entry(job: Any) -> dict[str, Any] | None:
    """The template entry of the job's current (or last) run, or None."""
    return template_entry_of(job)
