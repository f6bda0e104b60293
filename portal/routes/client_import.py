"""Importing clients from a CSV file, for the tenant's administrators (the pages of every
import: imports.py; the rows: db/people/client_import.py)."""

from __future__ import annotations

from db.people.client_import import CLIENT_IMPORT
from domain.messages import N_
from portal.routes.imports import ImportPages, import_routes

__all__ = ["PAGES", "ROUTES"]

# The pages' words are catalog ids (N_), translated where the pages show them.

PAGES = ImportPages(
    base="/clients/import", writer=CLIENT_IMPORT, title=N_("Import clients"), things=N_("clients"),
    thing=N_("client(s)"), back=("/clients", N_("All clients")), section="clients",
    lede=N_("Upload a CSV file of clients. Every row is checked first and you see what is wrong, "
         "line by line, before anything is written."),
    hint=N_("Uploading the same file again changes nothing: clients are matched by external_id. "
         "An existing client's expiry date is corrected on its page, with a reason, not by an import."),
    download="tocsin-clients-template.csv")

ROUTES = import_routes(PAGES)
