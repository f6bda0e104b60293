"""The one exception hierarchy of Tocsin's domain.

Each error is mapped to an exit code in one place (the CLI) and to an HTTP response in
one place (the portal); messages are written for the person who has to act on them.
"""

__all__ = ["Busy", "Conflict", "Forbidden", "InvalidInput", "NotFound", "TocsinError"]


class TocsinError(Exception):
    """Base of every error Tocsin raises on purpose.

    A message a person reads may be a catalog message with named placeholders
    (``InvalidInput(N_("unknown time zone “{value}”"), value=zone)``): ``str()`` gives it in
    English, and the portal gives ``template`` in the reader's language, filled with ``values``.
    """

    def __init__(self, *args: object, **values: object) -> None:
        self.template = str(args[0]) if args else ""
        self.values = values
        super().__init__(self.template.format(**values) if values else self.template, *args[1:])


class InvalidInput(TocsinError):
    """Input a person typed is malformed (a slug, a date, a time zone, an email)."""


class NotFound(TocsinError):
    """The thing named does not exist (or is not visible to the caller)."""


class Forbidden(TocsinError):
    """The caller is who they say, but their role may not do this (a team member on an
    administrator's page)."""


class Conflict(TocsinError):
    """The thing to create exists already."""


class Busy(TocsinError):
    """A budget is spent for now: the asker's own share (too many at once from them: 429)
    or the process's, shared by everyone (503). Either way, try again after a while."""

    def __init__(self, message: str, *, retry_after: int, own_share: bool) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds worth waiting before trying again
        self.own_share = own_share
