"""Every form field and query parameter of every portal route (read from the app's own
OpenAPI schema), filled with hostile values by hypothesis and sent by a signed-in
administrator with a valid CSRF token, so each request reaches its handler's parsers. Bad
input must be answered with 4xx and a message, never with 500."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.budget import is_server_error, share
from tests.fuzz.client import FuzzClient
from tests.fuzz.schema import Operation, operations
from tests.fuzz.values import FIELD
from tests.integration.portal_support import People, PortalClient


@st.composite
def requests(draw: st.DrawFn) -> tuple[Operation, str, dict[str, object], dict[str, object] | None]:
    operation = draw(st.sampled_from(operations()))
    path = operation.path
    for name, _kind in operation.path_params:
        value = draw(st.one_of(FIELD, st.integers(min_value=-5, max_value=50).map(str)))
        path = path.replace("{" + name + "}", quote(value, safe="") or "0")
    # Each declared field is sent most of the time, sometimes with an undeclared one beside.
    query = {n: draw(FIELD) for n in operation.query if draw(st.integers(0, 9)) < 7}
    if draw(st.integers(0, 9)) == 0:
        query[draw(st.sampled_from(["x", "page", "next"]))] = draw(FIELD)
    form = None
    if operation.form or operation.method == "POST":
        form = {n: draw(FIELD) for n in operation.form if draw(st.integers(0, 9)) < 7}
        if draw(st.integers(0, 9)) == 0:
            form[draw(st.sampled_from(["x", "_csrf_token", "data"]))] = draw(FIELD)
    return operation, path, query, form


def test_no_form_or_query_value_gets_a_server_error(portal: PortalClient, people: People) -> None:
    client = FuzzClient(portal, people)

    @settings(max_examples=share(0.35), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(request=requests())
    def send(request: tuple[Operation, str, dict[str, object], dict[str, object] | None]) -> None:
        operation, path, query, form = request
        response = client.send(operation.method, path, query=query, form=form,
                               headers={"HX-Request": "true"} if len(path) % 2 else {})
        assert not is_server_error(path, response.status_code), f"{operation.method} {path} {query} {form}"

    send()
