"""The shipped catalogs (en, de, fr) are complete: every message the code marks is in the
template `make translations` extracts, and translated in every catalog with the same
placeholders; the templates in scope hold no literal words outside their messages."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import html5lib
import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from domain.people.locales import SHIPPED_LOCALES
from tocsin.core.i18n import catalog_path, translations

ROOT = Path(__file__).resolve().parents[2]
LOCALE_DIR = ROOT / "tocsin" / "core" / "locale"
# What `make translations` extracts besides gettext/ngettext/_ (N_ marks an id translated
# later; portal.language's translate and translate_plural take the request first).
KEYWORDS = ["-k", "N_", "-k", "translate:2", "-k", "translate_plural:2,3"]
PLACEHOLDER = re.compile(r"\{[a-z_]+\}")
# The templates whose words readers see in their own language: the emails' layout and every
# page and fragment of the portal.
TEMPLATES_IN_SCOPE = [ROOT / "tocsin" / "providers" / "email_layout.html",
                      *sorted((ROOT / "portal" / "templates").glob("*.html"))]
# Attributes a person reads (or hears, from a screen reader) like text.
READ_ATTRIBUTES = ("placeholder", "title", "aria-label", "alt", "data-label")


def _catalog(path: Path | str) -> Catalog:
    with open(path, "rb") as source:
        return read_po(source)


def _extracted(tmp_path: Path) -> set[object]:
    out = tmp_path / "messages.pot"
    subprocess.run([str(Path(sys.executable).parent / "pybabel"), "-q", "extract", "-F", "babel.cfg",
                    *KEYWORDS, "--no-location", "-o", str(out), "domain", "tocsin", "portal"],
                   cwd=ROOT, check=True, capture_output=True)
    return {m.id for m in _catalog(out) if m.id}


def test_the_message_template_is_what_the_code_marks_today(tmp_path: Path) -> None:
    shipped = {m.id for m in _catalog(LOCALE_DIR / "messages.pot") if m.id}
    assert _extracted(tmp_path) == shipped, "run `make translations` and translate what is new"


@pytest.mark.parametrize("locale", SHIPPED_LOCALES)
def test_every_message_is_translated_in_every_shipped_catalog_with_its_placeholders(locale: str) -> None:
    template = [m for m in _catalog(LOCALE_DIR / "messages.pot") if m.id]
    catalog = _catalog(catalog_path(locale))
    missing = []
    for message in template:
        found = catalog.get(message.id)
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = () if found is None else (
            found.string if isinstance(found.string, tuple) else (found.string,))
        if found is None or found.fuzzy or not strings or not all(strings):
            missing.append(ids[0])
            continue
        for string in strings:
            assert set(PLACEHOLDER.findall(str(string))) == set(PLACEHOLDER.findall(ids[-1])), \
                f"{locale}: {ids[0]!r} -> {string!r}"
    assert not missing, f"{locale} lacks {len(missing)} translations: {missing[:5]}"


def test_a_german_reader_gets_german_words() -> None:
    assert translations("de").gettext("Renew access") == "Zugang verlängern"
    assert translations("fr").ngettext("{count} notification", "{count} notifications", 2) == \
        "{count} notifications"
    assert translations("xx").gettext("Renew access") == "Renew access"


@pytest.mark.parametrize("template", TEMPLATES_IN_SCOPE, ids=lambda p: p.name)
def test_the_templates_in_scope_hold_no_untranslated_literal_words(template: Path) -> None:
    source = template.read_text(encoding="utf-8")
    # Jinja's expressions and statements carry the words (from the catalogs); what is left
    # between the tags must be punctuation, entities or space.
    # Jinja comments are for developers, a body_class block holds CSS class names.
    source = re.sub(r"\{#.*?#\}|\{% block body_class %\}.*?\{% endblock %\}", "", source, flags=re.S)
    stripped = re.sub(r"\{\{.*?\}\}|\{%.*?%\}", "", source, flags=re.S)
    tree = html5lib.parse(stripped, namespaceHTMLElements=False)
    body = tree.find("body")
    assert body is not None
    words = [text for text in _texts(body) if re.search(r"[^\W\d_]", text)]
    words += [f"{name}={value!r}" for node in body.iter() if isinstance(node.tag, str)
              for name, value in node.attrib.items()
              if name in READ_ATTRIBUTES and re.search(r"[^\W\d_]", value)]
    assert not words, f"literal words in {template.name}: {words}"


def _texts(element: object) -> list[str]:
    """The text between the tags; a <code> element's own text is a literal identifier (a field
    name, an example slug), the same in every language."""
    out = []
    for node in element.iter():  # type: ignore[attr-defined]
        if node.tag == "code":
            if node.tail and node.tail.strip():
                out.append(node.tail.strip())
            continue
        if not isinstance(node.tag, str):  # a comment (Outlook's conditional markup)
            if node.tail and node.tail.strip():
                out.append(node.tail.strip())
            continue
        for text in (node.text, node.tail):
            if text and text.strip():
                out.append(text.strip())
    return out
