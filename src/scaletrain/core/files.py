"""Reading and writing the user's files, with errors that name the file and the fix.

Every file a user gives or a run folder holds (profiles, plan.toml, jobs.jsonl, run.json,
logs) may be missing, a folder, unreadable, or not text. Those are the user's to fix, so they
become a ScaletrainError here instead of a traceback.
"""

from __future__ import annotations

import codecs
import errno
from pathlib import Path

from scaletrain.core.errors import ScaletrainError

# errno -> what to do about it; the problem itself is the system's message.
_HINTS = {
    errno.ENOENT: "check the path (it is relative to the folder you run scaletrain in).",
    errno.ENOTDIR: "a part of that path is a file, not a folder: give a folder there.",
    errno.EISDIR: "give a file there, not a folder.",
    errno.EACCES: "check its permissions (ls -l), or use a place that you can read and write.",
    errno.EPERM: "check its permissions (ls -l), or use a place that you can read and write.",
    errno.EROFS: "that file system is read-only: use a folder on a writable one.",
    errno.ENOSPC: "the disk is full: free space (or your quota) there, or use another folder.",
    errno.EDQUOT: "your disk quota is full: free space there, or use another folder.",
    errno.ENAMETOOLONG: "use a shorter name.",
    errno.ELOOP: "the path has a symbolic link loop: give the real path.",
    errno.EEXIST: "something of that name exists already: move it away or choose another name.",
}


def os_problem(error: OSError, what: str = "") -> ScaletrainError:
    """An OSError as a user-facing error: which file, what the system said, what to do."""
    filename = error.filename if error.filename is not None else ""
    subject = f"{what} {filename!s}".strip() or "a file"
    reason = error.strerror or str(error)
    return ScaletrainError(
        f"Cannot use {subject}: {reason}.",
        _HINTS.get(error.errno or 0, "check that path; rerun with --debug for details."),
    )


def read_text(path: Path, what: str, *, errors: str = "strict", hint: str | None = None) -> str:
    """The UTF-8 text of a user's file; a clean error naming it if it cannot be read as text.

    `errors="replace"` reads what can be read (a log, a history whose lines are checked
    one by one) instead of refusing the whole file for one bad byte. `hint` replaces the
    general advice for a file that is not text.
    """
    try:
        return path.read_text(encoding="utf-8", errors=errors)
    except UnicodeDecodeError as error:
        raise ScaletrainError(
            f"The {what} {path} is not UTF-8 text (byte {error.start}: "
            f"{error.object[error.start : error.start + 1]!r}).",
            hint
            or "save it as UTF-8 text (an editor's 'save with encoding'), or give the right file.",
        ) from None
    except OSError as error:
        if error.filename is None:
            error.filename = str(path)
        raise os_problem(error, what) from None


class FileTail:
    """What was appended to a growing log since the last look (`logs -f`).

    A different path (a requeued job's new file, a restart's folder) or a file that shrank
    (rewritten from the start) is read from its beginning. A character cut in two by a
    look is shown whole by the next one.
    """

    def __init__(self) -> None:
        self._path: Path | None = None
        self._position = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def new_text(self, path: Path | None) -> str:
        """The text added to `path` since the last call; '' for None or a missing file."""
        if path is None or not path.is_file():
            return ""
        if path != self._path or path.stat().st_size < self._position:
            self._path, self._position = path, 0
            self._decoder.reset()
        with path.open("rb") as file:
            file.seek(self._position)
            data = file.read()
        self._position += len(data)
        return self._decoder.decode(data)
