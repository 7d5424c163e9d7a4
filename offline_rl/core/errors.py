"""Errors that describe a user's mistake rather than a bug in offline_rl.

Command-line entry points print these as a single line and exit with status 2, so every message
must stand alone: it names the file, key or flag, what was expected and what was found.
"""


class OfflineRLError(Exception):
    """Base class for user-facing errors (bad input, missing data, bad flags)."""


class DatasetError(OfflineRLError):
    """A dataset file or id cannot be used: missing, unreadable, malformed or inconsistent."""


class DownloadError(DatasetError):
    """A dataset is not on disk and could not be fetched."""


def first_line(error: BaseException) -> str:
    """An exception in a few words for a one-line message: its text's first line (HDF5's and others'
    errors run to several), or its type's name where it has no text."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class OfflineRLWarning(UserWarning):
    """Something a user should know about their data or settings that does not stop the run.

    Command-line entry points print these as one line, `warning: <message>`.
    """


class IgnoredFlagWarning(OfflineRLWarning):
    """A setting was given that has no effect with the others (named in the message)."""


class TrainingDiverged(OfflineRLError):
    """The update produced NaN or infinite values. Every update after such a value is meaningless
    (one NaN gradient makes every weight NaN), and a run resumes exactly, so running on or retrying
    with the same settings cannot help: the run stops with the settings to change. Usually a learning
    rate too high, or rewards too large for float32 (`--reward-scale`)."""


EXIT_USER_ERROR = 2
