"""Phone numbers as people type them, checked and written in E.164 (``+447700900123``) with
the `phonenumbers` library (Google's libphonenumber metadata): the only form SNS takes."""

from __future__ import annotations

import phonenumbers

from domain.errors import InvalidInput
from domain.messages import N_

__all__ = ["MAX_TYPED", "e164"]

MAX_TYPED = 40  # characters: longer is not a phone number


def e164(typed: str) -> str:
    """The number in E.164, or InvalidInput with a message a person can act on. Without a
    leading + and country code the number cannot be placed, so it is refused, not guessed."""
    text = typed.strip()
    if not text:
        raise InvalidInput(N_("enter a mobile number"))
    if len(text) > MAX_TYPED:
        raise InvalidInput(N_("that is too long for a phone number"))
    if not text.startswith(("+", "00")):
        raise InvalidInput(N_("start the number with + and its country code, e.g. +44 7400 123456"))
    try:
        number = phonenumbers.parse("+" + text[2:] if text.startswith("00") else text, None)
    except phonenumbers.NumberParseException:
        raise InvalidInput(N_("that is not a phone number: write it as + country code and number, "
                              "e.g. +44 7400 123456")) from None
    if not phonenumbers.is_valid_number(number):
        raise InvalidInput(N_("no such number exists in that country's numbering plan: check the digits"))
    if phonenumbers.number_type(number) not in (phonenumbers.PhoneNumberType.MOBILE,
                                                phonenumbers.PhoneNumberType.FIXED_LINE_OR_MOBILE):
        raise InvalidInput(N_("texts need a mobile number; that one is a landline or a service number"))
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
