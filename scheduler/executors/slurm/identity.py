"""Who a team's Slurm jobs run as, and the files they own (docs/slurm.md#security-model).

A queue's Slurm mapping names, per team, the Unix user its jobs run as. The executor
submits as that user (``sbatch --uid/--gid``: it runs as root or as Slurm's SlurmUser)
and gives each team directories of its own, owned by that user and closed to everyone
else (mode 0700): ``<SLURM_OUTPUT_DIR>/<user>`` (output files, the jobs' programs) and
``<SLURM_CHECKPOINT_DIR>/<user>/<job id>``. The base directories belong to the product
and are only traversable by others (mode 0711): a team cannot list them, nor reach
another team's files. Files are created without following links a team may have put in
its own directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from dataclasses import dataclass

TEAM_DIR_MODE = 0o700
BASE_DIR_MODE = 0o711


class IdentityError(Exception):
    """A team's jobs cannot run as its mapped user (the message says why)."""


@dataclass(frozen=True)
class Identity:
    """A team's Unix user as the executor submits under it."""

    user: str
    uid: int
    gid: int
    home: str

    def env(self) -> dict[str, str]:
        """What a job sees of its user (the product's own USER and HOME never reach it)."""
        return {"USER": self.user, "LOGNAME": self.user, "HOME": self.home}


def resolve(user: str) -> Identity:
    """The Unix user ``user`` of this host; never root nor the product's own user."""
    if not user:
        raise IdentityError("no Unix user")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise IdentityError(f"there is no Unix user {user} on this host") from None
    if entry.pw_uid == 0:
        raise IdentityError(f"Unix user {user} is root")
    if entry.pw_uid == os.geteuid():
        raise IdentityError(f"Unix user {user} is the product's own user")
    return Identity(user=user, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)


def base_dir(path: str) -> str:
    """A base directory of the teams' directories, made when missing (mode 0711)."""
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
        os.chmod(path, BASE_DIR_MODE)
    return path


def owned_dir(parent: str, name: str, ident: Identity) -> str:
    """``parent/name``, a directory of ``ident``'s user, mode 0700 (made, or put right when
    a link, another owner or a wider mode is found there)."""
    path = os.path.join(parent, name)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, TEAM_DIR_MODE)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode):  # a link or a file: not the team's directory
        os.unlink(path)
        os.mkdir(path, TEAM_DIR_MODE)
        found = os.lstat(path)
    if (found.st_uid, found.st_gid) != (ident.uid, ident.gid):
        os.chown(path, ident.uid, ident.gid, follow_symlinks=False)
    if stat.S_IMODE(found.st_mode) != TEAM_DIR_MODE:
        os.chmod(path, TEAM_DIR_MODE)
    return path


def write_program(directory: str, name: str, text: str, ident: Identity) -> str:
    """Write a job's program as ``directory/name``, the user's, mode 0700. Whatever the
    team left under that name (a link to a file of the product's...) is removed first,
    never followed."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700, dir_fd=dir_fd
        )
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchown(fd, ident.uid, ident.gid)
            os.fchmod(fd, 0o700)
            handle.write(text)
    finally:
        os.close(dir_fd)
    return os.path.join(directory, name)


def read_small(path: str, limit: int = 64) -> str:
    """The first ``limit`` characters of a file a job wrote, never through a link at its
    last component; OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return handle.read(limit).decode("ascii")
