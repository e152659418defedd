"""What a run on a host with other users must not hand them.

Ray's default temp folder, ``/tmp/ray``, is shared by every user of the host:
its session folders hold the instance's sockets and logs. A local instance
started by rlplat therefore lives in a folder of this user's own, mode 0700
(``private_temp_dir``). Servers that any local user could reach (the legacy
remote debugger of ``--debug-eager``, the multi-worker TensorFlow servers)
are announced with one warning when other users run processes here
(``other_users``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import List, Optional

# System accounts (daemons) are below this uid on Debian/Ubuntu/RHEL (login.defs UID_MIN);
# 65534 is `nobody`.
_FIRST_HUMAN_UID = 1000
_NOBODY_UID = 65534


class SharedHostError(OSError):
    """A folder that should be private is not, and cannot be made so; one line with the fix."""


def private_temp_dir(base: Optional[str] = None) -> str:
    """A folder for a local Ray instance that only this user can enter.

    ``<base>/rlplat-ray-<uid>``, where base is ``RAY_TMPDIR``, else
    ``TMPDIR``, else /tmp (the folders Ray itself would use). It is created 0700; an existing one must be a real folder
    owned by this user (a folder or link planted by someone else is refused),
    and is made 0700 if it is not.
    """
    base = base or os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    uid = os.geteuid()
    folder = os.path.join(base, f"rlplat-ray-{uid}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise SharedHostError(f"cannot create Ray's private temp folder {folder} ({e.strerror}); "
                              "set RAY_TMPDIR to a folder you can write") from None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise SharedHostError(f"{folder} is not a folder (a link or file was put there); remove it "
                              "or set RAY_TMPDIR to a private folder")
    if info.st_uid != uid:
        raise SharedHostError(f"{folder} belongs to user id {info.st_uid}, not you; remove it or set "
                              "RAY_TMPDIR to a private folder")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder


def other_users(proc_root: str = "/proc") -> List[int]:
    """The uids of people other than this user (and not system accounts) with processes here."""
    me = os.geteuid()
    uids = set()
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(os.path.join(proc_root, entry)).st_uid
        except OSError:  # the process ended meanwhile
            continue
        if uid != me and uid >= _FIRST_HUMAN_UID and uid != _NOBODY_UID:
            uids.add(uid)
    return sorted(uids)


def exposure_warning(what: str, proc_root: str = "/proc") -> Optional[str]:
    """One warning line when other users run processes here and ``what`` would be reachable
    by them; None on a host of one's own."""
    uids = other_users(proc_root)
    if not uids:
        return None
    shown = ", ".join(str(u) for u in uids[:5]) + (" ..." if len(uids) > 5 else "")
    return (f"warning: {what} can be reached by any user of this host, and user id(s) {shown} "
            "run processes here; use it only on a machine of your own")
