"""Links that must stay on this site: every form a browser could read as another origin is
refused, raw or percent-encoded; ordinary paths with queries pass unchanged."""

import pytest

from portal.auth import safe_next
from portal.links import local_path
from portal.templating import local_href

OFF_SITE = [
    "//evil.example",
    "/\\evil.example",  # browsers read a backslash as a slash
    "\\\\evil.example",
    "/\\/evil.example",
    "/\t/evil.example",  # browsers drop tabs and newlines from URLs
    "/\n/evil.example",
    "/\r\n/evil.example",
    " //evil.example",
    "/ /evil.example",
    "/\u3000/evil.example",
    "/%2F/evil.example",
    "/%2fevil.example",
    "/%5Cevil.example",
    "/%5cevil.example",
    "/%09/evil.example",
    "/" + "%09" * 40 + "/evil.example",
    "/%252F/evil.example",  # encoded twice
    "/%25252F%25252Fevil.example",
    "https://evil.example/",
    "javascript:alert(1)",
    "evil.example",
    "/\x00/evil.example",
    "/\x7f",
    "",
    "/" + "a" * 3000,
]


@pytest.mark.parametrize("path", OFF_SITE)
def test_paths_a_browser_could_read_as_another_origin_are_refused(path: str) -> None:
    assert local_path(path) is None
    assert local_href({"href": path}) is None
    assert safe_next(path) == "/"


@pytest.mark.parametrize("path", ["/", "/licence", "/clients/42", "/inbox?before=2027-01-01&id=3",
                                  "/ledger?rule=licence#top", "/preferences/%C3%A9"])
def test_ordinary_paths_on_this_site_pass_unchanged(path: str) -> None:
    assert local_path(path) == path
    assert local_href({"href": path}) == path


def test_a_link_that_is_not_text_is_dropped() -> None:
    assert local_href({"href": ["/licence"]}) is None
    assert local_href({}) is None


def test_sign_in_never_returns_to_the_login_page_itself() -> None:
    assert safe_next("/login?next=/x") == "/"


def test_encoded_characters_past_the_start_of_a_path_are_ordinary() -> None:
    for path in ("/ledger?rule=a%20b", "/ledger?rule=a%5Cb", "/clients?q=%2F%2F"):
        assert local_path(path) == path
