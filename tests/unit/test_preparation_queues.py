"""Which queue prepares a product's rule notices (domain/delivery/preparation_queues.py) and the
settings that name them."""

from __future__ import annotations

import pytest

from domain.delivery.preparation_queues import parse_product_queues, preparation_queue, preparation_queues
from domain.errors import InvalidInput
from tocsin.core.settings import ConfigError, load_settings

ENV = {"DATABASE_URL": "postgresql://localhost/tocsin", "REDIS_URL": "redis://localhost:6379/0"}


def test_a_named_product_has_its_own_queue_and_the_others_share_one() -> None:
    assert preparation_queue("fraud") == "prepare_fraud"
    assert preparation_queue("metrology") == "prepare_metrology"
    assert preparation_queue("payroll") == "prepare_other"
    assert preparation_queue("payroll", ("payroll",)) == "prepare_payroll"


def test_every_queue_a_worker_consumes_is_listed_once() -> None:
    assert preparation_queues(("fraud", "whistle")) == ["prepare_fraud", "prepare_whistle", "prepare_other"]


def test_the_setting_lists_product_codes_and_refuses_anything_else() -> None:
    assert parse_product_queues(" fraud, whistle ,,fraud") == ("fraud", "whistle")
    for bad in ("Fraud", "fraud-cases", "9lives", "other"):
        with pytest.raises(InvalidInput):
            parse_product_queues(bad)


def test_the_settings_default_to_three_products_and_five_attempts() -> None:
    settings = load_settings(ENV)
    assert (settings.product_queues, settings.prepare_max_attempts) == (("fraud", "whistle", "metrology"), 5)
    changed = load_settings({**ENV, "PRODUCT_QUEUES": "permits", "PREPARE_MAX_ATTEMPTS": "2"})
    assert (changed.product_queues, changed.prepare_max_attempts) == (("permits",), 2)
    with pytest.raises(ConfigError, match="PREPARE_MAX_ATTEMPTS"):
        load_settings({**ENV, "PREPARE_MAX_ATTEMPTS": "0"})
    with pytest.raises(ConfigError, match="PRODUCT_QUEUES"):
        load_settings({**ENV, "PRODUCT_QUEUES": "Not A Code"})
