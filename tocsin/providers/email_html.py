"""The text/html part of every email: one Jinja layout (email_layout.html) with its CSS inlined
by css-inline once, when the layout is first loaded, not for every email.

Mail clients drop or ignore a <style> block (Gmail's app for other accounts, Outlook's Word
engine for many properties), so each element carries its own style attribute; the media
queries (phones, dark mode) stay in the <style> block for the clients that read it. Inlining
the layout's source once and then rendering it gives the very bytes that rendering and then
inlining each email would (tests/unit/test_email_html.py compares the two), at a fraction of
the cost: css-inline costs more per email than the Jinja render itself (docs/benchmarks/render.md,
where MJML is measured too).

The brand's colour reaches the inlined styles through a placeholder colour (BRAND_PLACEHOLDER),
replaced by a Jinja expression after inlining: css-inline would otherwise have to parse
template syntax inside CSS. The colour is checked to be "#rrggbb" (domain.delivery.email_content.Brand).
"""

from __future__ import annotations

import threading
from importlib.resources import files

import css_inline
import jinja2

from domain.delivery.email_content import EmailContent

__all__ = ["BRAND_PLACEHOLDER", "LAYOUT", "inline_each_time", "layout_source", "render_html"]

LAYOUT = "email_layout.html"
BRAND_PLACEHOLDER = "#010203"  # stands for the brand's colour in the layout's CSS

_ENVIRONMENT = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True)
_lock = threading.Lock()
_template: jinja2.Template | None = None


def _inliner() -> css_inline.CSSInliner:
    # keep_at_rules: the @media rules (phones, dark mode) cannot be inlined and stay in a
    # <style> block; no remote stylesheets are ever loaded.
    return css_inline.CSSInliner(keep_at_rules=True, load_remote_stylesheets=False)


def layout_source() -> str:
    return files("tocsin.providers").joinpath(LAYOUT).read_text(encoding="utf-8")


def _compiled() -> jinja2.Template:
    global _template
    with _lock:
        if _template is None:
            inlined = _inliner().inline(layout_source())
            inlined = inlined.replace(BRAND_PLACEHOLDER, "{{ c.brand.colour }}")
            _template = _ENVIRONMENT.from_string(inlined)
        return _template


def render_html(content: EmailContent) -> str:
    """The HTML part of ``content``: every value escaped, every style inline."""
    return _compiled().render(c=content)


def inline_each_time(content: EmailContent) -> str:
    """The same part the slow way (render, then inline this email): what render_html must
    equal, and the benchmark's comparison."""
    source = layout_source().replace(BRAND_PLACEHOLDER, "{{ c.brand.colour }}")
    return _inliner().inline(_ENVIRONMENT.from_string(source).render(c=content))
