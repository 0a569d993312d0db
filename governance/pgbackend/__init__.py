"""The database backend: Django's PostgreSQL backend, with a cheaper check of a kept
connection (``base.DatabaseWrapper``)."""
