"""Keys kept in the data folder: made once, readable by the product's user only.

Without ``SECRET_KEY`` in the environment the settings use ``DATA_DIR/secret_key``, made
at the first start, so each installation signs its sessions with its own key (never one
written in the code). The same helper keeps the audit trail's key
(``DATA_DIR/audit_key``), which must live outside the database it protects.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

KEY_BYTES = 48


def data_folder_key(path: Path) -> str:
    """The key stored at ``path``; made (random, mode 0600) when the file does not exist.

    Several processes starting at once agree: the key is written to a file of its own and
    linked into place, which fails when another process linked first; then its key is read.
    """
    if path.exists():
        return _read(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(KEY_BYTES) + "\n")
        with contextlib.suppress(FileExistsError):  # another process linked first
            os.link(draft, path)
    finally:
        draft.unlink()
    return _read(path)


def _read(path: Path) -> str:
    key = path.read_text().strip()
    if not key:
        raise RuntimeError(f"{path}: the key file is empty (restore it from a backup)")
    return key
