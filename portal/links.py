"""Links that must stay on this site: the page to return to after signing in, a
notification's deep link. Browsers are lenient with what they call a path: `/\\evil.example`
and `/<tab>/evil.example` are read as `//evil.example`, another origin, so anything that a
browser might read as scheme-relative is refused, in raw or percent-encoded form."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

__all__ = ["DECODE_ROUNDS", "MAX_LINK_LENGTH", "local_path"]

MAX_LINK_LENGTH = 2048  # characters; a deep link or return path is never longer
DECODE_ROUNDS = 3  # percent-decoding passes checked: "%252F" is "%2F" after one, "/" after two


def _plain_path(path: str) -> bool:
    if not path.startswith("/") or path[1:2] in ("/", ""):
        return path == "/"
    if any(c == "\\" or c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return False
    parts = urlsplit(path)
    return not parts.scheme and not parts.netloc


def _leads_off_site(decoded: str) -> bool:
    """A decoded form that would be scheme-relative once a browser drops tabs and newlines
    and reads backslashes as slashes."""
    start = "".join(c for c in decoded if c not in "\t\r\n").lstrip(" ").replace("\\", "/")
    return not start.startswith("/") or start.startswith("//")


def local_path(path: object) -> str | None:
    """The path when it can only lead to this site; None for anything else."""
    if not isinstance(path, str) or not path or len(path) > MAX_LINK_LENGTH or not _plain_path(path):
        return None
    decoded = path
    for _ in range(DECODE_ROUNDS):
        decoded, previous = unquote(decoded), decoded
        if decoded == previous:
            return path
        if _leads_off_site(decoded):
            return None
    return None  # still changing after every round: encoded more deeply than any real link
