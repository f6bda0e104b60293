"""What one email says, apart from how it looks: the subject, the preheader, the heading, the
paragraphs, the one action, the digest's groups, the "why you got this" line and the links
every email carries (manage preferences, one-click unsubscribe), with the tenant's brand.

Each email kind builds one EmailContent (domain/delivery/email_kinds.py); both MIME parts are
rendered from it: the text part here, the HTML part by tocsin/providers/email_html.py. So the
copy of a kind is written once, and the two parts cannot say different things.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_COLOUR",
    "MAX_DIGEST_LINES",
    "RTL_LANGUAGES",
    "Action",
    "Brand",
    "DigestGroup",
    "DigestLine",
    "EmailContent",
    "contrast_on_white",
    "direction_of",
    "paragraphs_of",
    "text_part",
]

DEFAULT_COLOUR = "#1d4ed8"  # Tocsin's blue: 6.7:1 on white (WCAG AA needs 4.5:1)
MAX_DIGEST_LINES = 60  # items a digest lists before "and N more": keeps it under Gmail's clip
RTL_LANGUAGES = frozenset({"ar", "fa", "he", "ur", "yi", "ps"})
_HEX_COLOUR = re.compile(r"#[0-9a-fA-F]{6}")


@dataclass(frozen=True)
class Brand:
    name: str  # the tenant's display name, shown in the header and the footer
    colour: str = DEFAULT_COLOUR  # "#rrggbb", AA on white (checked where it is saved)
    logo_url: str | None = None  # absolute URL served by the portal
    footer: str = ""  # the postal address bulk-mail rules require

    def __post_init__(self) -> None:
        if not _HEX_COLOUR.fullmatch(self.colour):
            raise ValueError(f"a brand colour is #rrggbb, not {self.colour!r}")


@dataclass(frozen=True)
class Action:
    label: str
    url: str  # absolute


@dataclass(frozen=True)
class DigestLine:
    title: str
    detail: str
    when: str  # already formatted for the recipient ("due 7 December 2026", or "")
    url: str | None  # absolute


@dataclass(frozen=True)
class DigestGroup:
    heading: str  # "client · rule"
    count_label: str  # "3 notifications"
    lines: tuple[DigestLine, ...]


@dataclass(frozen=True)
class EmailContent:
    kind: str
    locale: str  # a BCP 47 tag: "en", "de", "fr"
    subject: str
    preheader: str
    heading: str
    paragraphs: tuple[str, ...]
    why: str  # "You receive this because ..."
    preferences_label: str
    preferences_url: str  # absolute
    brand: Brand
    action: Action | None = None
    groups: tuple[DigestGroup, ...] = ()
    more: str = ""  # "and 12 more in your portal" when a digest was cut
    unsubscribe_label: str = ""
    unsubscribe_url: str | None = None  # absolute; the List-Unsubscribe URL too
    footer_note: str = ""  # "Sent by Tocsin for <tenant>"
    links: tuple[str, ...] = field(default=(), compare=False)  # filled in by __post_init__

    def __post_init__(self) -> None:
        urls = [self.preferences_url]
        if self.action:
            urls.append(self.action.url)
        urls += [line.url for group in self.groups for line in group.lines if line.url]
        if self.unsubscribe_url:
            urls.append(self.unsubscribe_url)
        object.__setattr__(self, "links", tuple(urls))

    @property
    def direction(self) -> str:
        return direction_of(self.locale)


def direction_of(locale: str) -> str:
    """ "rtl" for a right-to-left language, else "ltr" (the HTML dir attribute)."""
    return "rtl" if locale.replace("-", "_").split("_")[0].lower() in RTL_LANGUAGES else "ltr"


def paragraphs_of(text: str) -> tuple[str, ...]:
    """A body as paragraphs: split on blank lines, each paragraph's lines joined by spaces."""
    blocks = re.split(r"\n\s*\n", text.strip())
    return tuple(" ".join(block.split()) for block in blocks if block.strip())


def text_part(content: EmailContent) -> str:
    """The text/plain part: the same words and links as the HTML part, every URL written out."""
    out = [content.heading, ""]
    for paragraph in content.paragraphs:
        out += [paragraph, ""]
    if content.action:
        out += [f"{content.action.label}: {content.action.url}", ""]
    for group in content.groups:
        out += [f"{group.heading} ({group.count_label})", "-" * min(72, len(group.heading) + 4)]
        for line in group.lines:
            out.append(f"- {line.title}" + (f" ({line.when})" if line.when else ""))
            if line.detail:
                out.append(f"  {line.detail}")
            if line.url:
                out.append(f"  {line.url}")
        out.append("")
    if content.more:
        out += [content.more, ""]
    out += ["--", content.why, f"{content.preferences_label}: {content.preferences_url}"]
    if content.unsubscribe_url:
        out.append(f"{content.unsubscribe_label}: {content.unsubscribe_url}")
    out += ["", content.brand.name]
    out += [line for line in content.brand.footer.splitlines() if line.strip()]
    if content.footer_note:
        out.append(content.footer_note)
    return "\n".join(out) + "\n"


def _luminance(colour: str) -> float:
    channels = []
    for i in (1, 3, 5):
        c = int(colour[i:i + 2], 16) / 255
        channels.append(c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
    r, g, b = channels
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_on_white(colour: str) -> float:
    """WCAG 2 contrast ratio of ``colour`` ("#rrggbb") against white: AA for body text and
    for white text on the colour (a button) needs 4.5."""
    if not _HEX_COLOUR.fullmatch(colour):
        raise ValueError(f"a colour is #rrggbb, not {colour!r}")
    return 1.05 / (_luminance(colour) + 0.05)
