"""gettext's marker for a message id that is translated later, where it is used (N_): what
`make translations` extracts besides the calls to gettext and ngettext."""

from __future__ import annotations

__all__ = ["N_"]


def N_(message: str) -> str:
    return message
