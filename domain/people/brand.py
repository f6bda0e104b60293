"""A tenant's brand, checked before it is stored: the primary colour must be readable on white
(WCAG AA, 4.5:1: it colours links and the button behind white text), and a logo is a PNG, a
JPEG or an SVG of at most 200 kB whose type is read from its bytes, never from what the upload
claims; an SVG is kept only without scripts, event handlers or references outside itself
(it is shown by mail clients and by the portal: an external reference would track the reader,
a script would run in the portal's origin)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from domain.delivery.email_content import contrast_on_white
from domain.errors import InvalidInput

__all__ = ["AA_CONTRAST", "LOGO_TYPES", "MAX_LOGO_BYTES", "Logo", "check_colour", "check_logo",
           "portal_theme"]

AA_CONTRAST = 4.5  # WCAG 2 AA for normal text
MAX_LOGO_BYTES = 200 * 1024  # bytes
LOGO_TYPES = ("image/png", "image/jpeg", "image/svg+xml")
_SVG_NS = "{http://www.w3.org/2000/svg}"
_EXTERNAL = re.compile(r"^\s*(?!#)\S")  # any reference that is not to a fragment of the SVG itself
_URL_IN_STYLE = re.compile(r"url\(\s*['\"]?\s*(?!#)", re.I)


@dataclass(frozen=True)
class Logo:
    content_type: str
    data: bytes


def check_colour(colour: str) -> str:
    colour = colour.strip().lower()
    if not re.fullmatch(r"#[0-9a-f]{6}", colour):
        raise InvalidInput(f"a colour is written #rrggbb (for example #1d4ed8), not {colour!r}")
    ratio = contrast_on_white(colour)
    if ratio < AA_CONTRAST:
        raise InvalidInput(
            f"{colour} has a contrast of {ratio:.1f}:1 on white; links and buttons need at least "
            f"{AA_CONTRAST}:1 to be readable (WCAG AA). Choose a darker shade")
    return colour


def _sniffed(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"<?xml", b"<svg", b"<!--")) and b"<svg" in data[:4096].lower():
        return "image/svg+xml"
    return None


def check_logo(data: bytes, declared_type: str) -> Logo:
    """The logo as it will be stored, or InvalidInput saying why it is refused."""
    if not data:
        raise InvalidInput("the logo file is empty")
    if len(data) > MAX_LOGO_BYTES:
        raise InvalidInput(f"the logo is {len(data) // 1024} kB; at most {MAX_LOGO_BYTES // 1024} kB")
    actual = _sniffed(data)
    if actual is None:
        raise InvalidInput("the logo is not a PNG, a JPEG or an SVG image")
    declared = declared_type.split(";")[0].strip().lower()
    if declared and declared != actual and not (declared == "image/jpg" and actual == "image/jpeg"):
        raise InvalidInput(f"the file says it is {declared}, but its content is {actual}: "
                           "upload the image itself, not a renamed file")
    if actual == "image/svg+xml":
        _check_svg(data)
    return Logo(actual, data)


def _check_svg(data: bytes) -> None:
    upper = data.upper()
    if b"<!DOCTYPE" in upper or b"<!ENTITY" in upper:
        raise InvalidInput("the SVG declares a DOCTYPE or entities; save it as plain SVG")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as error:
        raise InvalidInput(f"the SVG is not well-formed XML ({error})") from None
    if root.tag != f"{_SVG_NS}svg" and root.tag != "svg":
        raise InvalidInput("the file is XML but not an SVG image")
    for element in root.iter():
        tag = str(element.tag).rsplit("}", 1)[-1].lower()
        if tag in ("script", "foreignobject", "iframe", "embed", "object"):
            raise InvalidInput(f"the SVG contains a <{tag}> element; logos may not run code")
        for name, value in element.attrib.items():
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on"):
                raise InvalidInput(f"the SVG has an event handler ({local}); logos may not run code")
            if local == "href" and _EXTERNAL.match(value):
                raise InvalidInput("the SVG refers to something outside itself "
                                   f"({value[:60]!r}); embed everything in the file")
            if local == "style" and _URL_IN_STYLE.search(value):
                raise InvalidInput("the SVG's styles load something from outside the file")
        if tag == "style" and element.text and (_URL_IN_STYLE.search(element.text)
                                                or "@import" in element.text.lower()):
            raise InvalidInput("the SVG's styles load something from outside the file")


def _mixed(colour: str, towards: int, share: float) -> str:
    channels = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (towards - c) * share):02x}" for c in channels)


def portal_theme(colour: str) -> str:
    """The portal's stylesheet for a brand colour (checked by check_colour): the accent, a
    darker one for hovers (more contrast still) and a pale tint behind current navigation,
    on which the darker accent keeps AA; and a bar in the colour along the header's top."""
    colour = check_colour(colour)
    strong, soft = _mixed(colour, 0, 0.25), _mixed(colour, 255, 0.9)
    return (f":root {{ --accent: {colour}; --accent-strong: {strong}; --accent-soft: {soft}; }}\n"
            f".topbar {{ border-top: 4px solid {colour}; }}\n")
