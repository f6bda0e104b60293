"""Every email kind, in every shipped language, for a branded tenant: both parts say the same
thing, the HTML parses cleanly, links are absolute and in the text part too, hostile data is
escaped, the message stays under Gmail's clipping size, and the layout inlined once renders
what inlining each email would."""

from __future__ import annotations

import email.policy
import xml.etree.ElementTree as ET
from email import message_from_bytes
from email.message import EmailMessage

import html5lib
import pytest

from domain.delivery.email_content import contrast_on_white
from domain.people.locales import SHIPPED_LOCALES
from tests.support.email_samples import BRAND, HOSTILE, PORTAL, UNSUBSCRIBE, ZONE, sample_facts
from tocsin.providers.email_compose import Rendered, render_email
from tocsin.providers.email_html import inline_each_time
from tocsin.providers.mime_message import MessageComposer
from tocsin.providers.ses import OutgoingEmail

GMAIL_CLIPS_AT = 102 * 1024  # bytes; the issue asks for under 100 kB
NS = "{http://www.w3.org/1999/xhtml}"
CASES = [(locale, kind) for locale in SHIPPED_LOCALES for kind in sample_facts(locale)]


def rendered(locale: str, kind: str) -> Rendered:
    facts = sample_facts(locale)[kind]
    unsubscribe = None if kind == "digest" else UNSUBSCRIBE
    return render_email(facts, ZONE, BRAND, PORTAL, unsubscribe)


def parse(html: str) -> ET.Element:
    parser = html5lib.HTMLParser(strict=True, namespaceHTMLElements=True)
    return parser.parse(html)


@pytest.mark.parametrize(("locale", "kind"), CASES)
def test_every_kind_renders_valid_html_with_absolute_links_that_the_text_part_repeats(
    locale: str, kind: str
) -> None:
    email = rendered(locale, kind)
    tree = parse(email.html)  # strict: raises on any parse error
    root = tree
    assert root.get("lang") == locale and root.get("dir") == "ltr"
    metas = {m.get("name"): m.get("content") for m in tree.iter(f"{NS}meta")}
    assert metas["color-scheme"] == "light dark"
    links = [a.get("href") or "" for a in tree.iter(f"{NS}a")]
    assert links, "every email links to the portal"
    for link in links:
        assert link.startswith(PORTAL + "/"), link
        assert link in email.text, f"{link} missing from the text part"
    assert PORTAL + "/preferences" in links
    for image in tree.iter(f"{NS}img"):
        assert (image.get("src") or "").startswith(PORTAL + "/")
        assert image.get("alt") == BRAND.name
    [preheader] = [d for d in tree.iter(f"{NS}div") if "preheader" in (d.get("class") or "")]
    assert "".join(preheader.itertext()).strip() == email.content.preheader.strip()
    assert email.content.why in email.text
    assert "<style" not in email.html.split("</head>")[1], "no style block in the body"


@pytest.mark.parametrize(("locale", "kind"), CASES)
def test_every_message_stays_under_gmails_clipping_size_with_both_parts(locale: str, kind: str) -> None:
    email = rendered(locale, kind)
    raw = MessageComposer("Acme <notifications@acme.example>").compose(OutgoingEmail(
        "<delivery-1.acme@acme.example>", "zoe@example.com", email.subject, email.text, {},
        unsubscribe_url=UNSUBSCRIBE, html=email.html))
    assert len(raw) < 100 * 1024 < GMAIL_CLIPS_AT
    message = message_from_bytes(raw, policy=email_policy())
    assert isinstance(message, EmailMessage)
    assert message.get_content_type() == "multipart/alternative"
    parts = [(p.get_content_type(), p.get_content()) for p in message.iter_parts()]  # type: ignore[attr-defined]
    assert [t for t, _ in parts] == ["text/plain", "text/html"]
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


def email_policy() -> email.policy.EmailPolicy:
    return email.policy.default


@pytest.mark.parametrize("kind", ["licence_reminder", "invitation", "rule_notice", "digest"])
def test_hostile_subject_data_is_escaped_in_the_html_and_readable_in_the_text(kind: str) -> None:
    email = rendered("en", kind)
    assert "<script>" not in email.html
    assert "&lt;script&gt;" in email.html
    assert HOSTILE in email.text  # the text part is not HTML: the words read as written
    tree = parse(email.html)
    assert not list(tree.iter(f"{NS}script"))
    assert HOSTILE in "".join(tree.itertext())  # and the HTML shows the same words
    blocks = [e for e in tree.iter() if e.tag in (f"{NS}p", f"{NS}h1", f"{NS}h2")
              and HOSTILE in "".join(e.itertext())]
    assert blocks and {e.get("dir") for e in blocks} == {"auto"}  # right-to-left words keep their order


@pytest.mark.parametrize("kind", sorted(sample_facts()))
def test_the_layout_inlined_once_renders_what_inlining_each_email_renders(kind: str) -> None:
    email = rendered("en", kind)
    once = ET.tostring(parse(email.html))
    each = ET.tostring(parse(inline_each_time(email.content)))
    assert once == each


def test_the_default_and_the_sample_brand_colours_pass_aa_contrast_on_white() -> None:
    from domain.delivery.email_content import DEFAULT_COLOUR

    assert contrast_on_white(DEFAULT_COLOUR) >= 4.5
    assert contrast_on_white(BRAND.colour) >= 4.5
    assert contrast_on_white("#ffff00") < 4.5


def test_a_digest_groups_its_items_by_client_and_rule_with_counts() -> None:
    email = rendered("en", "digest")
    headings = [g.heading for g in email.content.groups]
    assert headings == [f"{HOSTILE} · Licence", "large case", "Other notifications"]
    assert [g.count_label for g in email.content.groups] == ["2 notifications", "1 notification",
                                                              "1 notification"]
    assert email.content.subject == "Daily digest: 4 notifications"
