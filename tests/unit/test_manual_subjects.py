"""A person's subject form becomes the very event a host would send to the events API."""

from __future__ import annotations

import pytest

from domain.events.intake import InvalidEvents, parse_event
from domain.events.manual import ManualSubject, close_event, field_names, manual_event, parse_pairs


def test_the_form_is_the_event_a_host_would_send() -> None:
    form = ManualSubject("permit", "P-1", "Boiler permit", "2031-05-31", "Europe/Paris", "open",
                         "ana@example.com, ben@example.com", "region = north", "site = Harbour")
    expected, problems = parse_event({
        "product": "manual", "type": "created",
        "subject": {"kind": "permit", "external_id": "P-1", "title": "Boiler permit",
                    "time_zone": "Europe/Paris", "status": "open",
                    "assignees": ["ana@example.com", "ben@example.com"],
                    "hierarchy": {"region": "north"},
                    "fields": {"site": "Harbour", "due_on": "2031-05-31"}}})
    assert problems == [] and manual_event(form, creating=True) == expected


def test_an_edit_is_an_update_and_a_field_taken_off_the_form_is_set_to_null() -> None:
    before = ManualSubject("permit", "P-1", due_on="2031-05-31", fields="site = Harbour")
    after = ManualSubject("permit", "P-1", due_on="2031-06-30")
    event = manual_event(after, creating=False, cleared=field_names(before) - field_names(after))
    assert (event.event_type, event.trigger_type) == ("updated", "field_changed")
    assert dict(event.subject.fields) == {"due_on": "2031-06-30", "site": None}


def test_every_problem_of_a_form_is_reported_at_once() -> None:
    with pytest.raises(InvalidEvents) as refused:
        manual_event(ManualSubject("Not A Code", "", due_on="tomorrow", fields="oops"), creating=True)
    paths = {p.path for p in refused.value.problems}
    assert {"fields line 1", "subject.fields.due_on", "subject.kind", "subject.external_id"} <= paths


def test_closing_is_a_status_change_and_pairs_ignore_blank_lines() -> None:
    event = close_event("permit", "P-1")
    assert (event.trigger_type, event.subject.status) == ("status_changed", "closed")
    assert parse_pairs("a = 1\n\n b=2 \n", "fields") == {"a": "1", "b": "2"}
