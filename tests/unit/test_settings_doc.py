"""The configuration page is the settings classes': every variable they read is described,
and docs/operations/configuration.md is exactly what the generator writes from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal.settings import load_portal_settings
from tocsin.boot import settings_doc
from tocsin.core.settings import load_settings
from tocsin.core.settings_docs import PORTAL_SETTINGS_DOCS, SETTINGS_DOCS

ROOT = Path(__file__).resolve().parents[2]


def test_every_variable_load_settings_reads_has_a_description() -> None:
    names, _ = settings_doc.variables_read(load_settings)
    assert [n for n in names if n not in SETTINGS_DOCS] == [], (
        "describe these in tocsin/core/settings_docs.py, then run `make settings-doc`"
    )


def test_every_variable_the_portal_settings_read_has_a_description() -> None:
    names, _ = settings_doc.variables_read(lambda env: load_portal_settings("http://x", env))
    assert [n for n in names if n not in PORTAL_SETTINGS_DOCS] == [], (
        "describe these in tocsin/core/settings_docs.py, then run `make settings-doc`"
    )


def test_no_description_names_a_variable_nothing_reads() -> None:
    process, _ = settings_doc.variables_read(load_settings)
    portal, _ = settings_doc.variables_read(lambda env: load_portal_settings("http://x", env))
    assert sorted(set(SETTINGS_DOCS) - set(process)) == []
    assert sorted(set(PORTAL_SETTINGS_DOCS) - set(portal)) == []


def test_the_page_states_the_default_the_loader_gives() -> None:
    page = settings_doc.render()
    assert "| `SCAN_INTERVAL_SECONDS` | `int` | `900` |" in page
    assert "| `EVENTS_WAKEUP` | `bool` | `on` |" in page
    assert "| `PRODUCT_QUEUES` | `tuple[str, ...]` | `fraud,whistle,metrology` |" in page


def test_a_variable_without_a_description_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(SETTINGS_DOCS, "RELAY_BATCH")
    with pytest.raises(settings_doc.UndocumentedSetting, match="RELAY_BATCH"):
        settings_doc.render()


def test_the_committed_configuration_page_is_the_generated_one() -> None:
    committed = (ROOT / settings_doc.PAGE).read_text()
    assert committed == settings_doc.render(), (
        f"{settings_doc.PAGE} is out of date: run `make settings-doc` and commit it"
    )
