"""Telling people what happened: in the app, by email and by webhook.

A service that changes something people wait for calls :func:`tell` inside its own
transaction: the notifications are rows written with the change, so a rolled-back change
tells nobody, and a committed one is in everyone's list at once. Email and webhooks leave
only after the commit, from a Celery task (``governance.tasks.deliver_notifications``);
beat's sweep sends what a lost task left (``deliver_due``). Each event has a key, and a
person is told of one key once (a unique constraint), so a retried task or a repeated
cycle never tells twice.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from governance import roles
from governance.models import (
    AuditEvent,
    Membership,
    MembershipRole,
    Notification,
    NotificationKind,
    NotificationPreference,
)
from governance.models.notifications import EMAIL_BY_DEFAULT
from governance.roles import AnyUser
from governance.services import audit
from governance.services.errors import Errors, PermissionDenied

log = logging.getLogger(__name__)

DELIVER_TASK = "governance.tasks.deliver_notifications"
WEBHOOK_TIMEOUT_SECONDS = 5.0
MAX_TITLE = 300
# Notifications one request may mark read by id.
MAX_READ_IDS = 1000


def _preferences(user_ids: Iterable[int]) -> dict[int, NotificationPreference]:
    return {p.user_id: p for p in NotificationPreference.objects.filter(user_id__in=user_ids)}


def _email_kinds(pref: NotificationPreference | None) -> set[str]:
    return set(pref.email_kinds) if pref is not None else {str(k) for k in EMAIL_BY_DEFAULT}


def tell(
    *,
    kind: NotificationKind,
    key: str,
    recipients: Iterable[int],
    title: str,
    body: str = "",
    url: str = "",
    exclude: AnyUser | None = None,
    at: datetime | None = None,
) -> list[Notification]:
    """Tell ``recipients`` (user ids) of one event, in the caller's transaction.

    ``exclude`` (the actor) is not told of what they did themselves. Who already had
    this ``key`` is skipped.
    """
    ids = set(recipients)
    if exclude is not None and exclude.is_authenticated:
        ids.discard(exclude.pk)
    ids &= set(
        get_user_model().objects.filter(pk__in=ids, is_active=True).values_list("pk", flat=True)
    )
    if not ids:
        return []
    prefs = _preferences(ids)
    now = at or timezone.now()
    rows = []
    for user_id in sorted(ids):
        pref = prefs.get(user_id)
        rows.append(
            Notification(
                recipient_id=user_id,
                kind=kind,
                key=key[:120],
                title=title[:MAX_TITLE],
                body=body,
                url=url[:300],
                created_at=now,
                email_due=str(kind) in _email_kinds(pref),
                webhook_due=bool(pref and pref.webhook_url and str(kind) in pref.webhook_kinds),
            )
        )
    Notification.objects.bulk_create(rows, ignore_conflicts=True)
    created = list(Notification.objects.filter(key=key[:120], recipient_id__in=ids, created_at=now))
    due = [n.pk for n in created if n.email_due or n.webhook_due]
    if due:
        transaction.on_commit(lambda: _send_later(due))
    return created


def _send_later(ids: list[int]) -> None:
    try:
        current_app.signature(DELIVER_TASK, args=(ids,)).apply_async(retry=False)
    except Exception:  # the broker is away: beat's sweep sends them (deliver_due)
        log.warning("could not queue the delivery of %d notifications", len(ids))


# --- who is told -------------------------------------------------------------------------


def team_people(team_id: int, *, leads_only: bool = False) -> set[int]:
    memberships = Membership.objects.filter(team_id=team_id)
    if leads_only:
        memberships = memberships.filter(role=MembershipRole.LEAD)
    return set(memberships.values_list("user_id", flat=True))


def reviewers() -> set[int]:
    """Everyone who may decide exceptions: reviewers and admins."""
    users = get_user_model().objects.filter(
        Q(groups__name__in=(roles.REVIEWER_GROUP, roles.ADMIN_GROUP)) | Q(is_superuser=True),
        is_active=True,
    )
    return set(users.values_list("pk", flat=True))


def admins() -> set[int]:
    """Everyone who administers the product."""
    users = get_user_model().objects.filter(
        Q(groups__name=roles.ADMIN_GROUP) | Q(is_superuser=True), is_active=True
    )
    return set(users.values_list("pk", flat=True))


# --- reading and preferences ---------------------------------------------------------------


def notifications_mark_read(*, actor: AnyUser, ids: Iterable[int] | None = None) -> int:
    """Mark the actor's notifications read (all of them when ``ids`` is None).

    Not audited: reading one's own notifications changes nothing anyone else relies on.
    """
    if not actor.is_authenticated:
        raise PermissionDenied({"detail": ["Sign in to read notifications."]})
    unread = Notification.objects.filter(recipient_id=actor.pk, read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=list(ids))
    return unread.update(read_at=timezone.now())


def preference_snapshot(pref: NotificationPreference | None) -> dict[str, Any]:
    return {
        "email_kinds": sorted(_email_kinds(pref)),
        "webhook_kinds": sorted(pref.webhook_kinds) if pref else [],
        "webhook_url": pref.webhook_url if pref else "",
    }


def _clean_kinds(errors: Errors, field: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.add(field, "Must be a list of notification kinds.")
        return []
    unknown = sorted(set(value) - set(NotificationKind.values))
    if unknown:
        errors.add(field, f"Unknown kinds: {', '.join(unknown)[:200]}.")
    return sorted(set(value) & set(NotificationKind.values))


def _clean_webhook(errors: Errors, value: Any) -> str:
    if not isinstance(value, str):
        errors.add("webhook_url", "Must be a URL.")
        return ""
    url = value.strip()
    if not url:
        return ""
    parsed = urlparse(url)
    if len(url) > 300 or parsed.scheme not in ("http", "https") or not parsed.netloc:
        errors.add("webhook_url", "Must be an http(s) URL of at most 300 characters.")
    return url


@transaction.atomic
def notification_preferences_update(
    *,
    actor: AnyUser,
    email_kinds: Any = None,
    webhook_kinds: Any = None,
    webhook_url: Any = None,
) -> NotificationPreference:
    """Set how the actor is told of each kind of event (fields left None stay as they are)."""
    if not actor.is_authenticated:
        raise PermissionDenied({"detail": ["Sign in to set your preferences."]})
    pref = NotificationPreference.objects.select_for_update().filter(user_id=actor.pk).first()
    before = preference_snapshot(pref)
    errors = Errors()
    values = dict(before)
    if email_kinds is not None:
        values["email_kinds"] = _clean_kinds(errors, "email_kinds", email_kinds)
    if webhook_kinds is not None:
        values["webhook_kinds"] = _clean_kinds(errors, "webhook_kinds", webhook_kinds)
    if webhook_url is not None:
        values["webhook_url"] = _clean_webhook(errors, webhook_url)
    if values["webhook_kinds"] and not values["webhook_url"]:
        errors.add("webhook_url", "Give a webhook URL to be told by webhook.")
    errors.raise_if_any()
    if pref is None:
        pref = NotificationPreference(user_id=actor.pk)
    pref.email_kinds = values["email_kinds"]
    pref.webhook_kinds = values["webhook_kinds"]
    pref.webhook_url = values["webhook_url"]
    pref.save()
    audit.record_change(
        event_type=AuditEvent.NOTIFICATION_PREFERENCES_CHANGED,
        actor=actor,
        subject=pref,
        before=before,
        after=preference_snapshot(pref),
    )
    return pref


# --- delivery ----------------------------------------------------------------------------------


def _post_webhook(url: str, notification: Notification) -> None:
    text = notification.title
    if notification.url:
        text += f"\n{settings.SITE_URL.rstrip('/')}{notification.url}"
    payload = json.dumps({"text": text, "kind": notification.kind}).encode()
    request = urllib.request.Request(
        url, data=payload, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:
        response.read(1024)


def deliver(ids: Iterable[int]) -> int:
    """Send the email and webhook of these notifications that are due and not yet sent;
    returns how many deliveries were made. Each notification is locked while it is sent,
    so two workers never send one twice."""
    sent = 0
    for pk in sorted(set(ids)):
        with transaction.atomic():
            note = (
                Notification.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("recipient", "recipient__notification_preference")
                .filter(pk=pk)
                .first()
            )
            if note is None:
                continue
            now = timezone.now()
            user: Any = note.recipient
            if note.email_due and note.emailed_at is None:
                if user.email:
                    body = note.body
                    if note.url:
                        body = f"{body}\n\n{settings.SITE_URL.rstrip('/')}{note.url}".strip()
                    send_mail(note.title, body, None, [user.email])
                    sent += 1
                note.emailed_at = now
            if note.webhook_due and note.webhook_sent_at is None:
                pref = getattr(user, "notification_preference", None)
                if pref is not None and pref.webhook_url:
                    try:
                        _post_webhook(pref.webhook_url, note)
                        sent += 1
                        note.delivery_error = ""
                    except OSError as exc:  # retried by the sweep until it is too old
                        note.delivery_error = f"webhook: {exc}"[:300]
                        note.save(update_fields=["emailed_at", "delivery_error"])
                        continue
                note.webhook_sent_at = now
            note.save(update_fields=["emailed_at", "webhook_sent_at", "delivery_error"])
    return sent


def deliver_due(*, now: datetime | None = None, older_than: float = 30.0) -> int:
    """Beat's sweep: deliver what is still due a while after it was written (its task was
    lost, or its webhook failed); gives up on what is a day old."""
    now = now or timezone.now()
    due = Notification.objects.filter(
        Q(email_due=True, emailed_at__isnull=True)
        | Q(webhook_due=True, webhook_sent_at__isnull=True),
        created_at__lte=now - timedelta(seconds=older_than),
        created_at__gte=now - timedelta(days=1),
    ).values_list("pk", flat=True)
    return deliver(list(due[:500]))


# --- the events ------------------------------------------------------------------------------
# One function per event the product tells of, called by the service that makes it happen,
# inside its transaction. URLs are the pages' paths (``web:`` URL names).


def _path(name: str, pk: int) -> str:
    from django.urls import reverse

    return reverse(name, args=[pk])


def exception_filed(exc: Any, actor: AnyUser) -> None:
    from governance.selectors.priorities import band_for

    band = band_for(exc.priority)
    owner = {band.exception_owner_id} if band is not None and band.exception_owner_id else set()
    target = f"job {exc.job.name}" if exc.job_id else f"share {exc.share.name}"
    tell(
        kind=NotificationKind.EXCEPTION_NEEDS_REVIEW,
        key=f"exception.filed:{exc.pk}",
        recipients=reviewers() | owner,
        title=f"Exception to review: team {exc.team.name} asks priority {exc.priority} "
        f"for {target}",
        body=exc.justification,
        url=_path("web:exception", exc.pk),
        exclude=actor,
    )


def exception_decided(exc: Any, actor: AnyUser) -> None:
    tell(
        kind=NotificationKind.EXCEPTION_DECIDED,
        key=f"exception.decided:{exc.pk}",
        recipients={exc.requester_id} | team_people(exc.team_id, leads_only=True),
        title=f"Exception {exc.pk} ({exc.team.name}, priority {exc.priority}) was "
        f"{exc.state} by {actor.get_username()}",
        body=exc.decision_note,
        url=_path("web:exception", exc.pk),
        exclude=actor,
    )


def job_stopped(job: Any, *, failed: bool, why: str, at: datetime) -> None:
    """A job was preempted (it waits again) or failed; its submitter and team leads hear."""
    kind = NotificationKind.JOB_FAILED if failed else NotificationKind.JOB_PREEMPTED
    what = "failed" if failed else "was preempted"
    tell(
        kind=kind,
        key=f"job.{'failed' if failed else 'preempted'}:{job.pk}:{job.run}",
        recipients={job.submitter_id} | team_people(job.share.team_id, leads_only=True),
        title=f"Job {job.name} {what}",
        body=why,
        url=_path("web:job", job.pk),
        at=at,
    )


def slurm_drift(queue: Any, slurm_job_id: int, what: str, at: datetime) -> None:
    """The drift guard found a Slurm job beyond what the product admitted on a queue's
    partitions (docs/slurm.md#security-model); admins hear, once per Slurm job."""
    tell(
        kind=NotificationKind.SLURM_DRIFT,
        key=f"slurm.drift:{queue.pk}:{slurm_job_id}",
        recipients=admins(),
        title=f"Queue {queue.name}: Slurm job {slurm_job_id} beyond what was admitted",
        body=what,
        url=_path("web:queue-slurm", queue.pk),
        at=at,
    )


def share_changed(share: Any, actor: AnyUser, reason: str, *, what: str = "changed") -> None:
    """A share of the team was created, ``changed`` (one event per saved version) or
    deleted; the team's leads and members hear, not the admin who did it."""
    key = {
        "created": f"share.created:{share.pk}",
        "deleted": f"share.deleted:{share.pk}",
    }.get(what, f"share.updated:{share.pk}:{share.version}")
    # A deleted share has no page left: point at its queue instead.
    url = _path("web:queue", share.queue_id) if what == "deleted" else _path("web:share", share.pk)
    tell(
        kind=NotificationKind.SHARE_CHANGED,
        key=key,
        recipients=team_people(share.team_id),
        title=f"Share {share.name} of team {share.team.name} was {what} by {actor.get_username()}",
        body=reason,
        url=url,
        exclude=actor,
    )


def evidence_moved(whatif: Any, *, source: Any, target: Any, actor: AnyUser) -> None:
    """A what-if that was evidence for ``source`` was attached to ``target``; the owner
    and editors of ``source`` hear (not the one who moved it)."""
    tell(
        kind=NotificationKind.AGREEMENT_EVIDENCE_MOVED,
        key=f"whatif.moved:{whatif.pk}:{source.pk}:{whatif.attached_at.isoformat()}",
        recipients={source.owner_id} | {e.pk for e in source.editors.all()},
        title=f"What-if {whatif.pk}, evidence for agreement '{source.title}', was moved to "
        f"agreement '{target.title}' by {actor.get_username()}",
        url=_path("web:agreement", source.pk),
        exclude=actor,
    )


def agreements_due(*, today: Any = None) -> int:
    """Beat's daily pass: tell the owner, the editors and the reviewers of agreements
    whose review date is within AGREEMENT_REVIEW_REMINDER_DAYS (once per date), and again
    when it came (once per date)."""
    from governance.models import Agreement

    today = today or timezone.localdate()
    soon = today + timedelta(days=settings.AGREEMENT_REVIEW_REMINDER_DAYS)
    told = 0
    people = reviewers()
    agreements = Agreement.objects.filter(review_by__lte=soon).prefetch_related("editors")
    for agreement in agreements:
        due = agreement.review_by <= today
        what = "is due for review" if due else "comes up for review"
        with transaction.atomic():
            told += len(
                tell(
                    kind=NotificationKind.AGREEMENT_REVIEW_DUE
                    if due
                    else NotificationKind.AGREEMENT_REVIEW_SOON,
                    key=f"agreement.{'review' if due else 'review_soon'}:{agreement.pk}:"
                    f"{agreement.review_by}",
                    recipients={agreement.owner_id}
                    | {e.pk for e in agreement.editors.all()}
                    | people,
                    title=f"Agreement '{agreement.title}' {what} (review by {agreement.review_by})",
                    url=_path("web:agreement", agreement.pk),
                )
            )
    return told


def change_request_filed(cr: Any, actor: AnyUser) -> None:
    """A lead asked to change a share: the admins hear (they decide), and so do the
    team's other leads."""
    tell(
        kind=NotificationKind.CHANGE_REQUEST_NEEDS_REVIEW,
        key=f"change_request.filed:{cr.pk}",
        recipients=admins() | team_people(cr.team_id, leads_only=True),
        title=f"Change request to review: team {cr.team.name} asks to change share {cr.share.name}",
        body=cr.justification,
        url=_path("web:change-request", cr.pk),
        exclude=actor,
    )


def change_request_decided(cr: Any, actor: AnyUser) -> None:
    """A change request was approved, rejected or withdrawn: its requester and the
    team's leads hear, and when it is withdrawn the admins too (nothing left to review)."""
    recipients = {cr.requester_id} | team_people(cr.team_id, leads_only=True)
    if cr.state == "withdrawn":
        recipients |= admins()
    tell(
        kind=NotificationKind.CHANGE_REQUEST_DECIDED,
        key=f"change_request.{cr.state}:{cr.pk}",
        recipients=recipients,
        title=f"Change request {cr.pk} (share {cr.share.name}) was {cr.state} by "
        f"{actor.get_username()}",
        body=cr.decision_note,
        url=_path("web:change-request", cr.pk),
        exclude=actor,
    )


def recovery_changed(
    workload: Any, *, job: Any, note: str, actor: AnyUser | None, at: datetime
) -> None:
    """A workload's recovery status changed (docs/workloads.md): its team's leads hear,
    with the job that was the evidence."""
    evidence = f" (evidence: job {job.pk})" if job is not None else ""
    tell(
        kind=NotificationKind.RECOVERY_CHANGED,
        key=f"workload.recovery:{workload.pk}:{workload.recovery_status}:"
        f"{job.pk if job is not None else at.isoformat()}",
        recipients=team_people(workload.team_id, leads_only=True),
        title=f"Workload {workload.name} (team {workload.team.name}): recovery "
        f"{workload.recovery_status}{evidence}",
        body=note,
        url=_path("web:workload", workload.pk),
        exclude=actor,
        at=at,
    )


def decision_opened(decision: Any, *, at: datetime) -> None:
    """A job exhausted its preemption retries (docs/workloads.md#decisions): its team's
    leads hear that a decision is theirs, with its due time."""
    job = decision.job
    tell(
        kind=NotificationKind.DECISION_OPENED,
        key=f"decision.opened:{decision.pk}",
        recipients=team_people(decision.team_id, leads_only=True),
        title=f"Decision needed: job {job.name} exhausted its preemption retries "
        f"(due {decision.due_at:%Y-%m-%d %H:%M} UTC)",
        body="Resubmit it, reclassify its workload as protected, or close it with a reason.",
        url=_path("web:decision", decision.pk),
        at=at,
    )


def decision_reminder(decision: Any, *, overdue: bool, at: datetime) -> int:
    """An open decision's due time is near, or came: its team's leads hear, once each
    (the key names the decision and which reminder). Returns how many were told."""
    what = "is overdue" if overdue else "is due soon"
    kind = NotificationKind.DECISION_OVERDUE if overdue else NotificationKind.DECISION_DUE_SOON
    return len(
        tell(
            kind=kind,
            key=f"decision.{'overdue' if overdue else 'due_soon'}:{decision.pk}",
            recipients=team_people(decision.team_id, leads_only=True),
            title=f"Decision {decision.pk} on job {decision.job.name} {what} "
            f"(due {decision.due_at:%Y-%m-%d %H:%M} UTC)",
            url=_path("web:decision", decision.pk),
            at=at,
        )
    )
