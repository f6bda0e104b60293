"""The suite hashes passwords at the low cost its own marker allows (PASSWORD_HASH_COST=low,
TOCSIN_TESTING=1); what is checked is unchanged: a hash made at the standard cost, as
production stores it, still verifies, because argon2 reads the cost from the hash."""

from __future__ import annotations

from argon2 import PasswordHasher

from db.people.users import authenticate
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import PASSWORD, add_admin, scalar
from tocsin.core import runtime
from tocsin.core.settings import PasswordHashCost


def test_the_suite_hashes_at_the_low_cost_and_a_standard_hash_still_verifies(tenant: Tenant) -> None:
    assert runtime.settings().password_hash_cost is PasswordHashCost.LOW
    admin = add_admin(tenant)
    assert scalar(tenant, "SELECT password_hash FROM users WHERE id = %s", admin.id).startswith(
        "$argon2id$v=19$m=1024,t=1,p=1$")

    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE users SET password_hash = %s WHERE id = %s",
                        [PasswordHasher().hash("a standard passphrase"), admin.id])
        assert authenticate(tx, admin.email, "a standard passphrase") == admin
        assert authenticate(tx, admin.email, PASSWORD) is None
