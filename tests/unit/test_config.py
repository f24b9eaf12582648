"""ProducerConfig: Java's defaults, both naming styles, validation, and the settings that constrain others."""
from __future__ import annotations

import ssl
import typing
from typing import Any, Dict, Union

import pytest

from kproducer.config import SETTINGS, ProducerConfig, Setting, canonical_name, parse_servers
from kproducer.errors import ConfigError

BOOT = {"bootstrap_servers": "127.0.0.1:9092"}


def cfg(**kw: Any) -> ProducerConfig:
    return ProducerConfig(**{**BOOT, **kw})


def test_defaults_equal_javas() -> None:
    c = cfg()
    java_defaults = {
        "acks": -1,  # "all" since Kafka 3.0
        "linger.ms": 5,  # since Kafka 4.0
        "batch.size": 16384,
        "buffer.memory": 33554432,
        "max.block.ms": 60000,
        "max.request.size": 1048576,
        "request.timeout.ms": 30000,
        "delivery.timeout.ms": 120000,
        "retries": 2147483647,
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 1000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 1000,
        "max.in.flight.requests.per.connection": 5,
        "metadata.max.age.ms": 300000,
        "metadata.max.idle.ms": 300000,
        "enable.idempotence": True,
        "transactional.id": None,
        "transaction.timeout.ms": 60000,
        "partitioner.ignore.keys": False,
        "connections.max.idle.ms": 540000,
        "socket.connection.setup.timeout.ms": 10000,
        "send.buffer.bytes": 131072,
        "receive.buffer.bytes": 32768,
        "security.protocol": "PLAINTEXT",
        "client.id": "",
        "compression.type": 0,  # none
        "compression.gzip.level": -1,  # Deflater.DEFAULT_COMPRESSION
        "compression.lz4.level": 9,
        "socket.connection.setup.timeout.max.ms": 30000,
        "client.dns.lookup": "use_all_dns_ips",
        "metadata.recovery.strategy": "rebootstrap",  # Kafka 4.0
        "metadata.recovery.rebootstrap.trigger.ms": 300000,
    }
    values = c.as_dict()
    for name, default in java_defaults.items():
        assert values[name] == default, name
    assert c.bootstrap_servers == [("127.0.0.1", 9092)]
    assert c.explicit == {"bootstrap.servers"}


def test_every_setting_is_reachable_by_both_names() -> None:
    for java, s in SETTINGS.items():
        assert canonical_name(java) == java
        assert canonical_name(s.alias) == java
        assert s.alias == java.replace(".", "_")


def _expected_annotation(setting: Setting) -> str:
    kind_type = setting.kind.type
    if setting.default is None and setting.required is None and kind_type != "Any":
        return f"Optional[{kind_type}]"  # None is the default: "not set"
    return kind_type


def _has_type(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin is Union:
        return any(_has_type(value, arg) for arg in typing.get_args(hint))
    if origin is None:
        return isinstance(value, hint)
    if not isinstance(value, origin):
        return False
    args = typing.get_args(hint)
    if origin is list:
        return all(_has_type(item, args[0]) for item in value)
    if origin is tuple and args[-1] is not Ellipsis:
        return len(value) == len(args) and all(_has_type(item, arg) for item, arg in zip(value, args))
    if origin is tuple:
        return all(_has_type(item, args[0]) for item in value)
    if origin is dict:
        return all(_has_type(k, args[0]) and _has_type(v, args[1]) for k, v in value.items())
    return True  # a Callable: callable is all that can be checked


def test_every_setting_has_an_attribute_of_its_type_and_every_attribute_a_setting() -> None:
    """ProducerConfig's annotations are written by hand: one per setting in the table, of the type its kind
    converts to (Optional where the default is None), and none without a setting."""
    annotations = dict(ProducerConfig.__annotations__)
    assert annotations == {s.alias: _expected_annotation(s) for s in SETTINGS.values()}
    # the types are real types, and the values the settings convert to have them
    hints = typing.get_type_hints(ProducerConfig, localns={"ssl": ssl})
    configs = [cfg(), cfg(**EVERY_SETTING_GIVEN)]
    for c in configs:
        for s in SETTINGS.values():
            value = getattr(c, s.alias)
            assert _has_type(value, hints[s.alias]), (s.java, value, hints[s.alias])
    assert [s.java for s in SETTINGS.values() if getattr(configs[1], s.alias) is None] == []  # every type was seen


class _Partitioner:
    def partition(self, topic: str, key: Any, key_bytes: Any, value: Any, value_bytes: Any, cluster: Any) -> int:
        return 0


class _Interceptor:
    def on_send(self, record: Any) -> Any:
        return record


#: a value for every setting (TLS and SASL settings are only read, not checked together, with PLAINTEXT)
EVERY_SETTING_GIVEN: Dict[str, Any] = {
    "compression_zstd_level": 3, "transactional_id": "t", "partitioner": _Partitioner(), "key_serializer": "str",
    "value_serializer": "json", "interceptor_classes": [_Interceptor()], "ssl_truststore_type": "PEM",
    "ssl_truststore_location": "ca.pem", "ssl_truststore_certificates": "pem", "ssl_truststore_password": "p",
    "ssl_keystore_type": "PKCS12", "ssl_keystore_location": "k.p12", "ssl_keystore_certificate_chain": "pem",
    "ssl_keystore_key": "k", "ssl_keystore_password": "p", "ssl_key_location": "k.pem", "ssl_key_password": "p",
    "ssl_cipher_suites": "ECDHE-RSA-AES128-GCM-SHA256", "ssl_context": ssl.create_default_context(),
    "sasl_mechanism": "PLAIN", "sasl_jaas_config": "x", "sasl_username": "u", "sasl_password": "p",
    "sasl_oauth_token_provider": lambda: "token", "sasl_oauthbearer_extensions": "a=b",
    "sasl_login_callback_handler_class": "OAuthBearerLoginCallbackHandler", "sasl_oauthbearer_method": "oidc",
    "sasl_oauthbearer_token_endpoint_url": "https://127.0.0.1/token", "sasl_oauthbearer_client_id": "c",
    "sasl_oauthbearer_client_secret": "s", "sasl_oauthbearer_scope": "s", "sasl_login_connect_timeout_ms": 1000,
    "sasl_login_read_timeout_ms": 1000, "https_ca_location": "ca.pem", "https_ca_pem": "pem",
    "stats_cb": lambda stats: None, "error_cb": lambda error: None,
}


def test_java_names_and_python_aliases_are_equivalent() -> None:
    a = ProducerConfig({"bootstrap.servers": "h:1", "linger.ms": 7, "batch.size": 100})
    b = ProducerConfig(bootstrap_servers="h:1", linger_ms=7, batch_size=100)
    c = ProducerConfig({"bootstrap.servers": "h:1"}, linger_ms=7, batch_size=100)
    assert a.as_dict() == b.as_dict() == c.as_dict()
    assert a.linger_ms == 7 and a.explicit == {"bootstrap.servers", "linger.ms", "batch.size"}


def test_partitioner_class_alias() -> None:
    def part(topic: str, key: Any, value: Any, n: int) -> int:
        return 0

    assert cfg(partitioner_class=part).partitioner is part
    assert ProducerConfig({"bootstrap.servers": "h:1", "partitioner.class": part}).partitioner is part


def test_the_same_setting_twice_with_different_values_is_an_error() -> None:
    with pytest.raises(ConfigError, match="linger.ms and linger_ms are the same setting with different values"):
        ProducerConfig({"bootstrap.servers": "h:1", "linger.ms": 1}, linger_ms=2)
    with pytest.raises(ConfigError, match="linger.ms is given twice with different values"):
        ProducerConfig({"bootstrap.servers": "h:1", "linger.ms": 1}, **{"linger.ms": 2})
    assert ProducerConfig({"bootstrap.servers": "h:1", "linger.ms": "1"}, linger_ms=1).linger_ms == 1
    assert ProducerConfig({"bootstrap.servers": "h:1", "linger.ms": 1}, linger_ms=1).linger_ms == 1


@pytest.mark.parametrize("typo,closest", [
    ("linger.msec", "linger.ms"),
    ("lingr_ms", "linger_ms"),
    ("bootstrap_server", "bootstrap_servers"),
    ("batchsize", "batch_size"),
    ("enable.idempotency", "enable.idempotence"),
    ("max.in.flight.requests", "max.in.flight.requests.per.connection"),
])
def test_unknown_setting_names_the_closest_valid_one(typo: str, closest: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig({"bootstrap.servers": "h:1", typo: 1})
    msg = str(info.value)
    assert repr(typo) in msg and f"did you mean {closest!r}" in msg


def test_unknown_setting_with_nothing_close() -> None:
    with pytest.raises(ConfigError, match="unknown producer setting 'qqqqqqqqqqq'") as info:
        cfg(qqqqqqqqqqq=1)
    assert "did you mean" not in str(info.value)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        cfg(linger_ms="soon")


@pytest.mark.parametrize("name,value,fragment", [
    ("linger_ms", "soon", "linger.ms must be an integer"),
    ("linger_ms", True, "linger.ms must be an integer"),
    ("linger_ms", 1.5, "linger.ms must be an integer"),
    ("linger_ms", [5], "linger.ms must be an integer"),
    ("linger_ms", -1, "linger.ms must be at least 0"),
    ("request_timeout_ms", 2 ** 31, "32 bits"),  # an INT in Java
    ("batch_size", 2 ** 31, "32 bits"),
    ("max_block_ms", 2 ** 63, "64 bits"),  # a LONG in Java
    ("compression_gzip_level", 0, "-1 (zlib's default) or 1-9"),
    ("transactional_id", "", "must be non-empty"),
    ("client_dns_lookup", "default", "valid: use_all_dns_ips, resolve_canonical_bootstrap_servers_only"),
    ("metadata_recovery_strategy", "sometimes", "valid: none, rebootstrap"),
    ("buffer_memory", 0, "buffer.memory must be at least 1"),
    ("max_in_flight_requests_per_connection", 0, "at least 1"),
    ("compression_gzip_level", 10, "at most 9"),
    ("acks", 2, "acks must be 0, 1 or 'all'"),
    ("acks", "some", "acks must be 0, 1 or 'all'"),
    ("enable_idempotence", "yes", "enable.idempotence must be true or false"),
    ("enable_idempotence", 1, "enable.idempotence must be true or false"),
    ("client_id", 5, "client.id must be a string"),
    ("transactional_id", 5, "transactional.id must be a string"),
    ("key_serializer", "str.encode", "key.serializer must be callable"),
    ("compression_type", "lzma", "compression.type"),
    ("security_protocol", "TLS", "not supported; valid: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
])
def test_type_and_range_errors_name_the_setting(name: str, value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg(**{name: value})
    assert fragment in str(info.value)


@pytest.mark.parametrize("name,value,expected", [
    ("linger_ms", "10", 10),
    ("linger_ms", 10.0, 10),
    ("acks", "all", -1),
    ("acks", "-1", -1),
    ("acks", -1, -1),
    ("acks", "1", 1),
    ("acks", 0, 0),
    ("enable_idempotence", "False", False),
    ("enable_idempotence", "true", True),
    ("buffer_memory", 2 ** 33, 2 ** 33),  # a long in Java
    ("linger_ms", 2 ** 31, 2 ** 31),  # a long in Java
    ("compression_gzip_level", -1, -1),
    ("compression_lz4_level", 9, 9),
    ("client_dns_lookup", "RESOLVE_CANONICAL_BOOTSTRAP_SERVERS_ONLY", "resolve_canonical_bootstrap_servers_only"),
    ("metadata_recovery_strategy", "none", "none"),
    ("compression_type", "gzip", 1),
    ("security_protocol", "plaintext", "PLAINTEXT"),
    ("security_protocol", "ssl", "SSL"),
    ("security_protocol", " Ssl ", "SSL"),
])
def test_values_are_converted(name: str, value: Any, expected: Any) -> None:
    assert getattr(cfg(**{name: value}), name) == expected


def test_bootstrap_servers_forms() -> None:
    assert parse_servers("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert parse_servers(["a:1", "b:2"]) == [("a", 1), ("b", 2)]
    assert parse_servers("[::1]:9092") == [("::1", 9092)]
    for bad in ("a", "a:0", "a:65536", "a:x", "", ",", 5):
        with pytest.raises(ConfigError):
            parse_servers(bad)
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        ProducerConfig()


def test_setting_names_must_be_strings() -> None:
    with pytest.raises(ConfigError, match="must be strings"):
        ProducerConfig({"bootstrap.servers": "h:1", 5: 1})  # type: ignore[dict-item]


# -- idempotence -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name,alias,value", [
    ("acks", "acks", 1),
    ("acks", "acks", 0),
    ("retries", "retries", 0),
    ("max.in.flight.requests.per.connection", "max_in_flight_requests_per_connection", 6),
])
def test_explicit_idempotence_conflicts_name_both_settings(name: str, alias: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        cfg(enable_idempotence=True, **{alias: value})
    msg = str(info.value)
    assert "enable.idempotence" in msg and name in msg


@pytest.mark.parametrize("alias,value", [
    ("acks", 1), ("acks", 0), ("retries", 0),
])
def test_default_idempotence_gives_way_silently(alias: str, value: Any) -> None:
    c = cfg(**{alias: value})
    assert c.enable_idempotence is False
    assert getattr(c, alias) == value


def test_more_than_5_in_flight_with_default_idempotence_is_an_error_as_in_kafka_4() -> None:
    """KAFKA-17927 (Kafka 4.0): idempotence left at its default no longer gives way to
    max.in.flight.requests.per.connection > 5; ProducerConfig raises a ConfigException."""
    with pytest.raises(ConfigError, match="max.in.flight.requests.per.connection=6: at most 5") as info:
        cfg(max_in_flight_requests_per_connection=6)
    assert "enable.idempotence=false" in str(info.value)
    with pytest.raises(ConfigError, match="at most 5"):
        cfg(max_in_flight_requests_per_connection=6, acks=1)  # Java checks it even when acks turned idempotence off
    c = cfg(max_in_flight_requests_per_connection=6, enable_idempotence=False)
    assert c.max_in_flight_requests_per_connection == 6 and not c.enable_idempotence


def test_long_settings_take_64_bit_values_as_kafka_connect_sets_them() -> None:
    c = cfg(max_block_ms=9223372036854775807, linger_ms=2 ** 40, metadata_max_age_ms=2 ** 62,
            retry_backoff_ms=2 ** 33, retry_backoff_max_ms=2 ** 34, reconnect_backoff_ms=2 ** 32,
            reconnect_backoff_max_ms=2 ** 35, connections_max_idle_ms=2 ** 50, metadata_max_idle_ms=2 ** 40,
            socket_connection_setup_timeout_ms=2 ** 33, socket_connection_setup_timeout_max_ms=2 ** 34,
            buffer_memory=2 ** 40)
    assert c.max_block_ms == 9223372036854775807 and c.linger_ms == 2 ** 40
    assert c.delivery_timeout_ms == 2 ** 31 - 1  # an int in Java: linger.ms + request.timeout.ms, capped
    given = ProducerConfig({"bootstrap.servers": "h:1", "max.block.ms": "9223372036854775807"})
    assert given.max_block_ms == 2 ** 63 - 1


def test_a_clock_wait_of_a_64_bit_timeout_does_not_overflow() -> None:
    import threading

    from kproducer.clock import SYSTEM_CLOCK

    cond = threading.Condition()
    with cond:
        threading.Timer(0.05, lambda: _notify(cond)).start()
        assert SYSTEM_CLOCK.wait(cond, float(9223372036854775807)) is True  # no OverflowError


def _notify(cond: Any) -> None:
    with cond:
        cond.notify_all()


def test_reconnect_backoff_without_a_max_disables_exponential_backoff_as_java() -> None:
    """Java's CommonClientConfigs.postProcessReconnectBackoffConfigs."""
    c = cfg(reconnect_backoff_ms=200)
    assert c.reconnect_backoff_max_ms == 200
    c = cfg(reconnect_backoff_ms=200, reconnect_backoff_max_ms=5000)
    assert c.reconnect_backoff_max_ms == 5000
    c = cfg(reconnect_backoff_ms=200, reconnect_backoff_max_ms=100)  # max below initial: constant initial
    assert c.reconnect_backoff_max_ms == 200
    assert cfg().reconnect_backoff_max_ms == 1000


@pytest.mark.needs("lz4")
def test_compression_levels_as_java() -> None:
    assert cfg(compression_type="gzip").compression_level == -1
    assert cfg(compression_type="gzip", compression_gzip_level=-1).compression_level == -1
    assert cfg(compression_type="lz4").compression_level == 9
    assert cfg(compression_type="lz4", compression_lz4_level=12).compression_level == 12


def test_idempotence_compatible_settings() -> None:
    c = cfg(enable_idempotence=True, acks="all", retries=3, max_in_flight_requests_per_connection=5)
    assert c.enable_idempotence is True
    assert cfg(enable_idempotence=False, acks=1).enable_idempotence is False


def test_transactions_require_idempotence() -> None:
    assert cfg(transactional_id="tx").enable_idempotence is True
    with pytest.raises(ConfigError, match="transactional.id requires enable.idempotence"):
        cfg(transactional_id="tx", enable_idempotence=False)
    with pytest.raises(ConfigError, match="acks"):
        cfg(transactional_id="tx", acks=1)


# -- delivery.timeout.ms -----------------------------------------------------------------------------


def test_explicit_delivery_timeout_below_linger_plus_request_timeout_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        cfg(delivery_timeout_ms=1000, linger_ms=5, request_timeout_ms=30000)
    msg = str(info.value)
    assert "delivery.timeout.ms=1000" in msg and "linger.ms" in msg and "request.timeout.ms" in msg
    assert "30005" in msg
    assert cfg(delivery_timeout_ms=30005, linger_ms=5, request_timeout_ms=30000).delivery_timeout_ms == 30005


def test_default_delivery_timeout_grows_to_linger_plus_request_timeout() -> None:
    c = cfg(request_timeout_ms=200_000, linger_ms=10)
    assert c.delivery_timeout_ms == 200_010


def test_backoff_maximums_are_at_least_the_initial_values() -> None:
    c = cfg(retry_backoff_ms=2000, reconnect_backoff_ms=3000)
    assert c.retry_backoff_max_ms == 2000 and c.reconnect_backoff_max_ms == 3000


def test_compression_level_follows_the_codec() -> None:
    assert cfg(compression_type="gzip", compression_gzip_level=3).compression_level == 3
    assert cfg(compression_type="none", compression_gzip_level=3).compression_level is None


@pytest.mark.parametrize("name, java", [
    ("acks", "acks"), ("metadata_max_age_ms", "metadata.max.age.ms"), ("linger_ms", "linger.ms"),
    ("batch_size", "batch.size"), ("max_block_ms", "max.block.ms"), ("enable.idempotence", "enable.idempotence"),
    ("request.timeout.ms", "request.timeout.ms"), ("retries", "retries"),
])
def test_none_for_a_setting_with_a_default_is_a_config_error_naming_it(name: str, java: str) -> None:
    """None skipped every check (acks=None was accepted and no record was ever delivered; linger_ms=None raised
    a raw TypeError later): it is a ConfigError that names the setting as given and its default."""
    with pytest.raises(ConfigError, match=f"^{name} cannot be None: .*default \\({java}=") as info:
        ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", name: None})
    assert str(SETTINGS[java].default) in str(info.value)


def test_none_still_means_unset_where_the_default_is_none() -> None:
    config = ProducerConfig(bootstrap_servers="127.0.0.1:9092", transactional_id=None, compression_type=None,
                            sasl_mechanism=None, partitioner=None)
    assert config.transactional_id is None and config.sasl_mechanism is None
