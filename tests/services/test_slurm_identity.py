"""The teams' Unix users and directories of the Slurm executor (docs/slurm.md#security-model):
what a team leaves in its own directory never makes the product write elsewhere. No Slurm
needed; changing a file's owner needs root (as the executor runs), else these skip."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scheduler.executors.slurm import identity

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the executor's file work needs root")


@pytest.fixture
def nobody() -> identity.Identity:
    try:
        return identity.resolve("nobody")
    except identity.IdentityError as exc:
        pytest.skip(str(exc))


def test_a_team_never_runs_as_root_or_an_unknown_user() -> None:
    for user, message in (("root", "is root"), ("no-such-user-here", "no Unix user")):
        with pytest.raises(identity.IdentityError, match=message):
            identity.resolve(user)


def test_a_teams_directory_is_its_own_and_closed_whatever_was_there(
    tmp_path: Path, nobody: identity.Identity
) -> None:
    base = Path(identity.base_dir(str(tmp_path / "out")))
    assert stat.S_IMODE(base.stat().st_mode) == 0o711
    # The team (or anyone who could) left a link where its directory goes.
    elsewhere = tmp_path / "product-files"
    elsewhere.mkdir(mode=0o700)
    (base / nobody.user).symlink_to(elsewhere)
    made = Path(identity.owned_dir(str(base), nobody.user, nobody))
    found = made.lstat()
    assert stat.S_ISDIR(found.st_mode) and not made.is_symlink()
    assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (nobody.uid, 0o700)
    assert elsewhere.stat().st_uid == 0  # the link's target was never handed over
    # A directory opened wider or given away is put right.
    made.chmod(0o755)
    os.chown(made, 0, 0)
    identity.owned_dir(str(base), nobody.user, nobody)
    assert (made.stat().st_uid, stat.S_IMODE(made.stat().st_mode)) == (nobody.uid, 0o700)


def test_a_program_is_written_as_a_new_file_never_through_a_link(
    tmp_path: Path, nobody: identity.Identity
) -> None:
    team = Path(identity.owned_dir(str(tmp_path), nobody.user, nobody))
    secret = tmp_path / "settings.env"
    secret.write_text("SECRET_KEY=kept\n")
    (team / "gov-1-r1.program").symlink_to(secret)
    path = identity.write_program(str(team), "gov-1-r1.program", "#!/bin/sh\necho hi\n", nobody)
    assert secret.read_text() == "SECRET_KEY=kept\n"
    written = Path(path).lstat()
    assert stat.S_ISREG(written.st_mode)
    assert (written.st_uid, stat.S_IMODE(written.st_mode)) == (nobody.uid, 0o700)
    assert Path(path).read_text() == "#!/bin/sh\necho hi\n"
    # The executor reads what a job wrote (its checkpoint progress) never through a link.
    (team / "progress").symlink_to(secret)
    with pytest.raises(OSError):
        identity.read_small(str(team / "progress"))
    (team / "own").write_text("42\n")
    assert identity.read_small(str(team / "own")).strip() == "42"
