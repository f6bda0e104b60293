"""Importing clients from a CSV file, for the tenant's administrators (the pages of every
import: imports.py; the rows: db/people/client_import.py)."""

from __future__ import annotations

from db.people.client_import import CLIENT_IMPORT
from portal.routes.imports import ImportPages, import_routes

__all__ = ["PAGES", "ROUTES"]

PAGES = ImportPages(
    base="/clients/import", writer=CLIENT_IMPORT, title="Import clients", things="clients",
    thing="client(s)", back=("/clients", "All clients"), section="clients",
    lede="Upload a CSV file of clients. Every row is checked first and you see what is wrong, "
         "line by line, before anything is written.",
    hint="Uploading the same file again changes nothing: clients are matched by external_id. "
         "An existing client's expiry date is corrected on its page, with a reason, not by an import.",
    download="tocsin-clients-template.csv")

ROUTES = import_routes(PAGES)
