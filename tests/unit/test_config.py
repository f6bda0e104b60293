"""Settings are read once, fail loudly on a bad value, and never show a secret."""

import pytest

from tocsin.core.settings import ConfigError, PasswordHashCost, load_settings

BASE = {"DATABASE_URL": "postgresql://u@h/db", "REDIS_URL": "redis://h:6379/0"}


def test_defaults_fill_everything_but_the_two_service_urls() -> None:
    settings = load_settings(BASE)
    assert settings.scan_interval_seconds == 900
    assert settings.portal_url == "http://127.0.0.1:8000"
    assert settings.ses_endpoint_url is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDIS_URL": "redis://h"}, "DATABASE_URL is not set"),
        ({"DATABASE_URL": "postgresql://u@h/db"}, "REDIS_URL is not set"),
        ({**BASE, "DATABASE_URL": "mysql://u@h/db"}, "DATABASE_URL must be a postgresql://"),
        ({**BASE, "REDIS_URL": "http://h"}, "REDIS_URL must be a redis://"),
        ({**BASE, "SCAN_INTERVAL_SECONDS": "fifteen"}, "SCAN_INTERVAL_SECONDS must be a whole number"),
        ({**BASE, "SCAN_INTERVAL_SECONDS": "0"}, "SCAN_INTERVAL_SECONDS must be at least 1"),
        ({**BASE, "PORT": "-1"}, "PORT must be at least 1"),
    ],
)
def test_a_missing_or_malformed_setting_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_the_repr_hides_secrets() -> None:
    settings = load_settings({**BASE, "AWS_SECRET_ACCESS_KEY": "s3cr3t-key",
                              "SESSION_SECRET": "session-s3cr3t"})
    shown = repr(settings)
    assert "s3cr3t" not in shown
    assert "aws_secret_access_key='***'" in shown and "session_secret='***'" in shown
    assert "redis://h:6379/0" in shown


def test_sns_topics_are_a_checked_comma_separated_list_and_none_by_default() -> None:
    assert load_settings(BASE).sns_allowed_topic_arns == frozenset()
    topics = "arn:aws:sns:eu-west-1:123456789012:ses-events, arn:aws:sns:us-east-1:123456789012:other"
    assert load_settings({**BASE, "SNS_ALLOWED_TOPIC_ARNS": topics}).sns_allowed_topic_arns == {
        "arn:aws:sns:eu-west-1:123456789012:ses-events", "arn:aws:sns:us-east-1:123456789012:other"}
    with pytest.raises(ConfigError, match="SNS_ALLOWED_TOPIC_ARNS: invalid SNS topic ARN"):
        load_settings({**BASE, "SNS_ALLOWED_TOPIC_ARNS": "ses-events"})


def test_the_test_certificate_origin_is_refused_unless_it_is_loopback() -> None:
    assert load_settings(BASE).sns_test_cert_origin is None
    local = load_settings({**BASE, "SNS_TEST_CERT_ORIGIN": "http://127.0.0.1:9000"})
    assert local.sns_test_cert_origin == "http://127.0.0.1:9000"
    with pytest.raises(ConfigError, match="SNS_TEST_CERT_ORIGIN must be a loopback origin"):
        load_settings({**BASE, "SNS_TEST_CERT_ORIGIN": "https://certs.example.com"})


def test_the_broker_is_redis_unless_broker_url_names_rabbitmq() -> None:
    assert load_settings(BASE).broker_url is None
    assert load_settings({**BASE, "BROKER_URL": ""}).broker_url is None
    url = "amqps://tocsin:pw@rabbit.internal:5671/tocsin"
    assert load_settings({**BASE, "BROKER_URL": url}).broker_url == url


@pytest.mark.parametrize("url", ["redis://h:6379/0", "http://rabbit/", "amqp://", "rabbit:5672",
                                 "amqp://u:secret-pw@h:56x2/"])
def test_a_broker_url_that_is_not_rabbitmqs_is_refused_without_showing_its_password(url: str) -> None:
    with pytest.raises(ConfigError, match="BROKER_URL") as refused:
        load_settings({**BASE, "BROKER_URL": url})
    assert "secret-pw" not in str(refused.value)


def test_the_repr_shows_the_broker_url_without_its_password() -> None:
    shown = repr(load_settings({**BASE, "BROKER_URL": "amqp://tocsin:rabbit-s3cr3t@mq:5672/prod"}))
    assert "rabbit-s3cr3t" not in shown and "broker_url='amqp://tocsin:***@mq:5672/prod'" in shown


def test_the_backoff_pause_and_listen_retry_default_to_production_values_and_are_checked() -> None:
    settings = load_settings(BASE)
    assert (settings.prepare_backoff_min_seconds, settings.prepare_backoff_max_seconds) == (1.0, 30.0)
    assert settings.prepare_inline_pause_seconds == 60.0
    assert settings.events_listen_retry_seconds == 2.0
    short = load_settings({**BASE, "PREPARE_BACKOFF_MIN_SECONDS": "0.2", "PREPARE_BACKOFF_MAX_SECONDS": "1",
                           "PREPARE_INLINE_PAUSE_SECONDS": "3", "EVENTS_LISTEN_RETRY_SECONDS": "0.5"})
    assert (short.prepare_backoff_min_seconds, short.prepare_backoff_max_seconds) == (0.2, 1.0)
    assert (short.prepare_inline_pause_seconds, short.events_listen_retry_seconds) == (3.0, 0.5)
    with pytest.raises(ConfigError, match=r"PREPARE_BACKOFF_MAX_SECONDS \(2\) must be at least"):
        load_settings({**BASE, "PREPARE_BACKOFF_MIN_SECONDS": "5", "PREPARE_BACKOFF_MAX_SECONDS": "2"})
    for name in ("PREPARE_INLINE_PAUSE_SECONDS", "EVENTS_LISTEN_RETRY_SECONDS",
                 "PREPARE_BACKOFF_MIN_SECONDS"):
        with pytest.raises(ConfigError, match=f"{name} must be greater than 0"):
            load_settings({**BASE, name: "0"})


def test_the_low_password_hash_cost_is_refused_without_the_test_suites_marker() -> None:
    assert load_settings(BASE).password_hash_cost is PasswordHashCost.STANDARD
    with pytest.raises(ConfigError, match=r"PASSWORD_HASH_COST=low .* test suite only \(TOCSIN_TESTING=1\)"):
        load_settings({**BASE, "PASSWORD_HASH_COST": "low"})
    with pytest.raises(ConfigError, match="PASSWORD_HASH_COST=low"):
        load_settings({**BASE, "PASSWORD_HASH_COST": "low", "TOCSIN_TESTING": "yes"})
    with pytest.raises(ConfigError, match="PASSWORD_HASH_COST must be standard or low, got 'cheap'"):
        load_settings({**BASE, "PASSWORD_HASH_COST": "cheap", "TOCSIN_TESTING": "1"})
    testing = load_settings({**BASE, "PASSWORD_HASH_COST": "low", "TOCSIN_TESTING": "1"})
    assert testing.password_hash_cost is PasswordHashCost.LOW


def test_the_ses_read_timeout_defaults_to_20_seconds_and_reaches_the_client() -> None:
    from tocsin.providers.ses import aws_client

    assert load_settings(BASE).ses_read_timeout_seconds == 20.0
    patient = load_settings({**BASE, "SES_READ_TIMEOUT_SECONDS": "300", "SES_ENDPOINT_URL": "http://127.0.0.1:1"})
    assert aws_client(patient, "sesv2").meta.config.read_timeout == 300.0
    with pytest.raises(ConfigError, match="SES_READ_TIMEOUT_SECONDS must be greater than 0"):
        load_settings({**BASE, "SES_READ_TIMEOUT_SECONDS": "0"})


def test_the_pgbouncer_settings_default_to_the_direct_path_and_refuse_bad_values() -> None:
    settings = load_settings(BASE)
    assert settings.database_listen_url is None and settings.database_prepared_statements
    through = load_settings({**BASE, "DATABASE_LISTEN_URL": "postgresql://db:5432/tocsin",
                             "DATABASE_PREPARED_STATEMENTS": "0", "FULL_SCAN_HOURS": "6"})
    assert through.database_listen_url == "postgresql://db:5432/tocsin"
    assert not through.database_prepared_statements and through.full_scan_hours == 6.0
    for name, bad in (("DATABASE_LISTEN_URL", "db:5432"), ("DATABASE_PREPARED_STATEMENTS", "maybe"),
                      ("FULL_SCAN_HOURS", "0")):
        with pytest.raises(ConfigError, match=name):
            load_settings({**BASE, name: bad})
