"""Email rendering: figures, not a timed test.

    python -m bench.render [--emails 3000] [--delivery-cpu-ms 1.25]

On one core (one thread, CPU time from time.process_time), for every sample email kind
(tests/support/email_samples.py: a branded tenant, hostile subject data) in every shipped
locale, it measures in the same run:

  (a) today's composition before issue 26: the plain text (email_text) and its MIME message;
  (b) what the worker does now: the kind's content in the reader's language, the text part,
      the HTML part from the layout inlined once, and the multipart/alternative message;
  (c) the same with css-inline run over every email (render, then inline);
  (d) MJML through mjml-python: a Jinja-made MJML document per email, then mjml2html;

and prints emails/s and CPU per email of each, the ratios to (a), and the share of a
delivery's CPU that (b) costs beyond (a): the goal is at most 20%. A delivery's CPU
(``--delivery-cpu-ms``) comes from bench/deliver.py's "CPU per message" (worker + PostgreSQL
+ Redis + endpoint, 1 x 4); run that benchmark too to check its ratio stays >= 0.5.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import jinja2
import mjml

from domain.delivery.email_content import EmailContent
from domain.delivery.states import email_text
from domain.people.locales import SHIPPED_LOCALES
from tests.support.email_samples import BRAND, PORTAL, UNSUBSCRIBE, ZONE, sample_facts
from tocsin.providers.email_compose import render_email
from tocsin.providers.email_html import inline_each_time
from tocsin.providers.mime_message import MessageComposer
from tocsin.providers.ses import OutgoingEmail

GOAL_SHARE = 0.20  # rendering's extra CPU over a delivery's CPU, at most
_COMPOSER = MessageComposer("Acme Compliance <notifications@acme.example>")
# The same layout in MJML (bench/render.mjml), made per email by Jinja, then compiled by MJML.
_MJML = jinja2.Environment(autoescape=True).from_string(
    (Path(__file__).parent / "render.mjml").read_text(encoding="utf-8"))


def _samples() -> list[tuple[str, object]]:
    return [(kind, facts) for locale in SHIPPED_LOCALES for kind, facts in sample_facts(locale).items()]


def _plain(n: int) -> None:
    facts = sample_facts("en")["licence_reminder"]
    link = PORTAL + "/licence"
    for i in range(n):
        text = email_text("Access for Client 1 ends on 31 March 2027. Renew now.", link, UNSUBSCRIBE)
        _COMPOSER.compose(OutgoingEmail(f"<delivery-{i}.acme@acme.example>", "zoe@example.com",
                                        "Client 1: portal access renews in 30 days", text, {},
                                        unsubscribe_url=UNSUBSCRIBE))
    del facts


def _branded(n: int, html: Callable[[EmailContent], str] | None = None) -> int:
    samples = _samples()
    size = 0
    for i in range(n):
        _, facts = samples[i % len(samples)]
        rendered = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE)  # type: ignore[arg-type]
        body = rendered.html if html is None else html(rendered.content)
        raw = _COMPOSER.compose(OutgoingEmail(f"<delivery-{i}.acme@acme.example>", "zoe@example.com",
                                              rendered.subject, rendered.text, {},
                                              unsubscribe_url=UNSUBSCRIBE, html=body))
        size = max(size, len(raw))
    return size


def _mjml_html(content: EmailContent) -> str:
    return str(mjml.mjml2html(_MJML.render(c=content)))


def _measure(what: Callable[[int], object], n: int) -> float:
    what(min(n, 50))  # warm: templates compiled, catalogs read
    start = time.process_time()
    what(n)
    return (time.process_time() - start) / n * 1000  # ms of CPU per email


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--emails", type=int, default=3000)
    parser.add_argument("--delivery-cpu-ms", type=float, default=1.25,
                        help="a delivery's CPU end to end, from bench/deliver.py")
    args = parser.parse_args()
    n = args.emails
    print(f"render: {n} emails per variant, {len(_samples())} samples "
          f"({len(SHIPPED_LOCALES)} locales x kinds), one thread", flush=True)
    figures = {
        "a. plain text (before)": _measure(_plain, n),
        "b. branded HTML+text, layout inlined once": _measure(_branded, n),
        "c. branded, css-inline per email": _measure(lambda k: _branded(k, inline_each_time), n),
        "d. branded, MJML per email": _measure(lambda k: _branded(k, _mjml_html), max(200, n // 5)),
    }
    base = figures["a. plain text (before)"]
    for name, ms in figures.items():
        print(f"  {name:45s} {1000 / ms:9,.0f} emails/s  {ms:6.3f} ms CPU  x{ms / base:5.1f} of (a)")
    largest = _branded(len(_samples()))
    print(f"  largest message: {largest:,} bytes (goal < 100 kB)")
    extra = figures["b. branded HTML+text, layout inlined once"] - base
    share = extra / args.delivery_cpu_ms
    print(f"render share of a delivery's CPU ({args.delivery_cpu_ms} ms): {share:.1%} "
          f"(goal <= {GOAL_SHARE:.0%}): {'met' if share <= GOAL_SHARE else 'MISSED'}")
    for name in ("c. branded, css-inline per email", "d. branded, MJML per email"):
        other = (figures[name] - base) / args.delivery_cpu_ms
        print(f"  with {name[3:]}: {other:.1%}")
    return 0 if share <= GOAL_SHARE and largest < 100 * 1024 else 1


if __name__ == "__main__":
    raise SystemExit(main())
