"""The events API under generated events shaped like real ones (a known product, people and
regions, with hostile values in every slot: numbers past a double, NaN and the infinities,
values nested far too deep, line breaks before formulas in every string), sent singly and in
batches with a real key, and raw bodies nested thousands deep: each is recorded (201) or
refused with 400/422 and the path of its problem, never a 5xx. The reader of the JSON
itself, directly: it names problems, it never raises."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.events.api_keys import create_api_key
from db.platform.tenancy import Tenant
from domain.events.intake import parse_batch, parse_event
from tests.fuzz.budget import TALLY, is_server_error, share
from tests.fuzz.values import ANY_TEXT, DEEP_JSON, HUGE_INTEGERS, TRICKY
from tests.integration.intake_support import fraud_desk
from tests.integration.portal_support import PortalClient

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), HUGE_INTEGERS,
                   st.sampled_from(TRICKY), ANY_TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(ANY_TEXT, inner, max_size=4), max_leaves=12) | DEEP_JSON


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually a value the tenant knows (so requests reach the register), sometimes anything."""
    return st.sampled_from([True, True, True, False]).flatmap(lambda known: good if known else bad)


SUBJECT = st.fixed_dictionaries(
    {"kind": mostly(st.just("case"), JSON),
     "external_id": mostly(st.sampled_from(["C-1", "C-2", "C-3"]), SCALAR)},
    optional={
        "title": mostly(ANY_TEXT, SCALAR), "status": mostly(st.sampled_from(["open", "closed"]), SCALAR),
        "time_zone": mostly(st.just("Europe/London"), st.sampled_from(TRICKY) | SCALAR),
        "assignees": mostly(st.lists(st.sampled_from(["ana@example.com", "BEN@example.com "]), max_size=2),
                            st.lists(SCALAR, max_size=3) | JSON),
        "hierarchy": mostly(st.dictionaries(st.just("region"), st.sampled_from(["north", "south"]),
                                            max_size=1),
                            st.dictionaries(ANY_TEXT, SCALAR, max_size=2) | JSON),
        "fields": mostly(st.dictionaries(st.sampled_from(["amount", "currency", "note"]), JSON, max_size=3),
                         st.dictionaries(ANY_TEXT, JSON, max_size=3) | JSON),
        "forms": mostly(st.dictionaries(st.just("intake"),
                                        st.dictionaries(st.sampled_from(["q1", "q2"]), JSON, max_size=2),
                                        max_size=1),
                        st.dictionaries(ANY_TEXT, JSON, max_size=2) | JSON),
    })
CHANGES = mostly(st.dictionaries(st.sampled_from(["field.amount", "message.posted"]),
                                 st.fixed_dictionaries({}, optional={"from": JSON, "to": JSON}), max_size=2),
                 st.dictionaries(ANY_TEXT, JSON, max_size=2) | JSON)
OPTIONAL = {"occurred_at": mostly(st.just("2027-01-01T09:30:00Z"), st.sampled_from(TRICKY) | JSON),
            "changes": CHANGES, "metadata": mostly(st.dictionaries(ANY_TEXT, JSON, max_size=3), JSON)}
EVENT = st.one_of(
    st.fixed_dictionaries({"product": mostly(st.just("fraud"), JSON), "type": st.just("created"),
                           "subject": mostly(SUBJECT, JSON)}, optional=OPTIONAL),
    st.fixed_dictionaries({"product": mostly(st.just("fraud"), JSON), "type": st.just("updated"),
                           "trigger": mostly(st.sampled_from(["field_changed", "assigned"]), JSON),
                           "subject": mostly(SUBJECT, JSON)}, optional=OPTIONAL),
    st.fixed_dictionaries({"product": JSON, "type": st.just("deleted") | JSON, "subject": JSON},
                          optional={"trigger": JSON, **OPTIONAL}),
)
BODY = mostly(EVENT, JSON)
# Bodies no JSON encoder of ours writes: nested thousands deep, numbers JSON has not.
RAW_BODIES = [b"[" * 5000 + b"]" * 5000, b'{"events":' + b"[" * 3000 + b"]" * 3000 + b"}",
              b'{"a":' * 3000 + b"1" + b"}" * 3000, b'{"product": NaN}', b'{"events": [1e999]}',
              b'{"x": ' + b"9" * 5000 + b"}", b'{"x": -Infinity}']
BATCH = mostly(st.fixed_dictionaries({"events": st.lists(mostly(EVENT, JSON), max_size=5)}), JSON)


@settings(max_examples=share(0.1), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=BODY, batch=BATCH)
def test_reading_an_event_names_problems_and_never_raises(body: Any, batch: Any) -> None:
    event, problems = parse_event(body)
    assert (event is None) == bool(problems)
    events, problems = parse_batch(batch)
    if not problems:  # all of them, in order
        assert len(events) == len(batch["events"])
    assert all(p.path and p.message for p in problems)


def test_no_generated_event_gets_a_server_error(portal: PortalClient, tenant: Tenant) -> None:
    fraud_desk(tenant)
    headers = {"Authorization": f"Bearer {create_api_key(tenant.slug, 'fuzz')[1]}"}

    @settings(max_examples=share(0.15), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(body=BODY, batch=BATCH, replay=st.booleans(),
           raw=mostly(st.none(), st.sampled_from(RAW_BODIES)))
    def send(body: Any, batch: Any, replay: bool, raw: bytes | None) -> None:
        for path, sent in (("/api/v1/events", body), ("/api/v1/events/batch", batch)):
            extra = {"Idempotency-Key": f"fuzz-{hash(repr(sent))}"} if replay else {}
            # Python writes NaN and Infinity as such, as some hosts' encoders do.
            content = raw if raw is not None else json.dumps(sent).encode()
            response = portal.post(path, content=content,
                                   headers={**headers, **extra, "content-type": "application/json"})
            TALLY.record("POST", path, response.status_code)
            assert not is_server_error(path, response.status_code), f"{path} {sent!r}: {response.text}"
            assert response.status_code in (201, 400, 413, 422, 429), (response.status_code, response.text)
            if response.status_code >= 400:
                assert response.json()["error"], response.text

    send()
