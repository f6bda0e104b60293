"""Importing subjects of the built-in "manual" product from a CSV file, for the tenant's
administrators (the pages of every import: imports.py; the rows, each through the events
API's intake: db/events/subject_import.py)."""

from __future__ import annotations

from db.events.subject_import import SUBJECT_IMPORT
from portal.routes.imports import ImportPages, import_routes

__all__ = ["PAGES", "ROUTES"]

PAGES = ImportPages(
    base="/subjects/import", writer=SUBJECT_IMPORT, title="Import subjects", things="subjects",
    thing="subject(s)", back=("/subjects", "Subjects"), section="obligations",
    lede="Upload a CSV file of subjects. Every row is checked as the subject form checks it, and "
         "you see what is wrong, line by line, before anything is written. Each row is recorded "
         "as an event, so rules fire as for a subject saved on its form.",
    hint="Assignees are emails separated by commas; hierarchy and fields hold name = value pairs "
         "separated by semicolons. Subjects are matched by kind and external_id: uploading the same "
         "file again changes nothing, and a field left out of a row is cleared on its subject.",
    download="tocsin-subjects-template.csv")

ROUTES = import_routes(PAGES)
