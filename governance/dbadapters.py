"""Values read from and sent to PostgreSQL, converted at C speed where Django's are Python.

Two conversions are on every hot path and cost more in Python than the statement they
belong to. Both are installed on each new connection (``connection_created``), as psycopg
allows, and give byte-for-byte the values Django's would:

- **Timestamps read.** Django reads every ``timestamptz`` through a subclass of psycopg's
  pure-Python loader (to attach Django's time zone), which parses each value's text with a
  regular expression: about 3.5 µs a value, a third of the CPU of reading a job row (a
  job row carries a dozen timestamps; 1,000 full rows took 42 ms of CPU, 28 ms with
  ``IsoTzLoader``). It parses PostgreSQL's ISO output with ``datetime.fromisoformat``
  (C, 0.25 µs) and converts the instant to Django's zone. What ISO parsing does not take
  (another ``DateStyle``, BC dates, ``infinity``) goes to Django's own loader, so every
  error is the same error. Django compares the loader's ``timezone`` with its own on
  every cursor and puts its own loader back where they differ.
- **Arrays sent.** Django's ``bulk_create`` sends each column as one array
  (``INSERT ... SELECT * FROM UNNEST(%s::text[], ...)``), and psycopg escapes each quote
  and backslash of an array's text elements with ``re.sub`` and a group template, which
  expands in Python once per character escaped: the JSON of an audit entry's before and
  after has dozens. ``ListDumper`` escapes with ``bytes.replace`` instead (same output).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, tzinfo
from functools import lru_cache
from typing import Any

from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from psycopg.types import array

_parse = datetime.fromisoformat


@lru_cache(maxsize=8)
def loader_for(zone: tzinfo) -> type[BaseTzLoader]:
    """The loader class giving aware datetimes in ``zone`` (Django's connection zone)."""

    class IsoTzLoader(BaseTzLoader):
        timezone = zone

        def load(self, data: Any) -> datetime:
            try:
                value = _parse(str(data, "ascii"))
            except (ValueError, UnicodeDecodeError):
                return super().load(data)
            if value.tzinfo is None:  # not a timestamptz's text: Django's rule applies
                return super().load(data)
            return value.astimezone(zone)

    return IsoTzLoader


class ListDumper(array.ListDumper):
    """psycopg's text array dumper, escaping elements with ``bytes.replace``."""

    def _dump_list(
        self, obj: list[Any], tokens: list[Any], needs_quotes: Callable[[Any], object]
    ) -> None:
        if not obj:
            tokens.append(b"{}")
            return
        dump = self.sub_dumper.dump if self.sub_dumper else self._dump_item
        tokens.append(b"{")
        for item in obj:
            if item is None:
                tokens.append(b"NULL")
            elif isinstance(item, list):
                self._dump_list(item, tokens, needs_quotes)
            elif (value := dump(item)) is None:
                tokens.append(b"NULL")
            else:
                if needs_quotes(value):
                    value = bytes(value).replace(b"\\", b"\\\\").replace(b'"', b'\\"')
                    value = b'"' + value + b'"'
                tokens.append(value)
            tokens.append(self.delimiter)
        tokens[-1] = b"}"


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: this connection's conversions in C."""
    adapters = getattr(getattr(connection, "connection", None), "adapters", None)
    if connection.vendor != "postgresql" or adapters is None:
        return  # another database, or psycopg 2
    adapters.register_dumper(list, ListDumper)
    zone = getattr(connection, "timezone", None)
    if zone is not None:  # None: naive datetimes (USE_TZ off), Django's loader chops zones
        adapters.register_loader("timestamptz", loader_for(zone))
