"""A client organisation's contact person: who to call about the account. Optional, each
field checked so that what is stored can be shown and dialled."""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.errors import InvalidInput
from domain.people.identity import valid_email

__all__ = ["NO_CONTACTS", "PHONE", "Contacts", "valid_contacts"]

PHONE = re.compile(r"\+?[0-9][0-9 ().\-]{4,30}")  # digits with the usual separators
NAME_MAX_LENGTH = 200  # characters


@dataclass(frozen=True)
class Contacts:
    name: str = ""
    email: str = ""
    phone: str = ""


NO_CONTACTS = Contacts()


def valid_contacts(name: str, email: str, phone: str) -> Contacts:
    name, email, phone = name.strip(), email.strip(), phone.strip()
    if len(name) > NAME_MAX_LENGTH or any(ord(c) < 32 for c in name):
        raise InvalidInput(f"the contact's name: at most {NAME_MAX_LENGTH} characters, on one line")
    if email:
        email = valid_email(email)
    if phone and not PHONE.fullmatch(phone):
        raise InvalidInput("the contact's phone: digits, spaces, ( ) . - and an optional leading +, "
                           "such as +44 20 7946 0958")
    return Contacts(name, email, phone)
