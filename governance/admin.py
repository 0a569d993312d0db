"""``/django-admin/``: users and groups read-only.

Users, site roles (groups) and team memberships change only through the services
(``governance.services.users`` and ``teams``), which write the audit trail; a change made
in Django's admin would skip it. The admin still shows them, for looking up.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """No add, change or delete: every field shown read-only."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyUserAdmin(ReadOnlyAdminMixin, UserAdmin):
    pass


class ReadOnlyGroupAdmin(ReadOnlyAdminMixin, GroupAdmin):
    pass


for model, model_admin in ((get_user_model(), ReadOnlyUserAdmin), (Group, ReadOnlyGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
