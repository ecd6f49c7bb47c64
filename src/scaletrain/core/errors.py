"""Errors that say what is wrong and how to fix it."""

from __future__ import annotations


class ScaletrainError(Exception):
    """A problem the user can fix; the message names it and ends with a HINT."""

    def __init__(self, problem: str, hint: str) -> None:
        self.problem = problem
        self.hint = hint
        super().__init__(f"{problem}\nHINT: {hint}")


class LaunchEnvironmentError(ScaletrainError):
    """The launcher's environment variables are missing or contradict each other."""
