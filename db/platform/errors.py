"""Errors of the database layer; driver exceptions are translated into these."""

from domain.errors import TocsinError

__all__ = ["DatabaseUnavailable", "NotMigrated"]


class DatabaseUnavailable(TocsinError):
    """PostgreSQL cannot be reached."""


class NotMigrated(TocsinError):
    """The control schema does not exist: `tocsin migrate` has not run against this database."""
