"""A tenant's brand is checked before it is stored: the colour must pass AA on white, and a
logo's type is read from its bytes, an SVG refused with anything that runs or loads."""

from __future__ import annotations

import pytest

from domain.errors import InvalidInput
from domain.people.brand import MAX_LOGO_BYTES, check_colour, check_logo

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 64
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'


def test_a_colour_that_fails_aa_contrast_on_white_is_refused_with_the_ratio() -> None:
    assert check_colour("#1D4ED8") == "#1d4ed8"
    with pytest.raises(InvalidInput, match=r"#ffd700 has a contrast of 1\.4:1 on white"):
        check_colour("#ffd700")
    with pytest.raises(InvalidInput, match="#rrggbb"):
        check_colour("blue")


@pytest.mark.parametrize(("data", "declared", "kind"), [
    (PNG, "image/png", "image/png"), (JPEG, "image/jpeg", "image/jpeg"), (JPEG, "image/jpg", "image/jpeg"),
    (SVG, "image/svg+xml", "image/svg+xml"), (PNG, "", "image/png")])
def test_a_logo_is_typed_by_its_bytes(data: bytes, declared: str, kind: str) -> None:
    assert check_logo(data, declared).content_type == kind


def test_a_logo_that_lies_about_its_type_is_refused_with_a_clear_message() -> None:
    with pytest.raises(InvalidInput, match="says it is image/png, but its content is image/jpeg"):
        check_logo(JPEG, "image/png")
    with pytest.raises(InvalidInput, match="not a PNG, a JPEG or an SVG"):
        check_logo(b"GIF89a....", "image/png")
    with pytest.raises(InvalidInput, match="at most 200 kB"):
        check_logo(PNG + b"\x00" * MAX_LOGO_BYTES, "image/png")


@pytest.mark.parametrize(("svg", "why"), [
    (b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "<script>"),
    (b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', "event handler"),
    (b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:x="http://www.w3.org/1999/xlink">'
     b'<image x:href="https://tracker.example/p.png"/></svg>', "outside itself"),
    (b'<svg xmlns="http://www.w3.org/2000/svg"><style>@import url(https://x.example/a.css);</style></svg>',
     "styles load"),
    (b'<svg xmlns="http://www.w3.org/2000/svg"><foreignObject><p>x</p></foreignObject></svg>',
     "foreignobject"),
    (b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaa">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>',
     "DOCTYPE"),
])
def test_an_svg_with_a_script_or_an_external_reference_is_refused(svg: bytes, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        check_logo(svg, "image/svg+xml")


def test_an_svg_referring_to_its_own_fragments_is_kept() -> None:
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:x="http://www.w3.org/1999/xlink">'
           b'<defs><path id="p" d="M0 0h1"/></defs><use x:href="#p"/></svg>')
    assert check_logo(svg, "image/svg+xml").content_type == "image/svg+xml"
