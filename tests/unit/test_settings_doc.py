"""docs/settings.md is generated from kproducer/config.py by tools/gen_settings_doc.py: this test fails
when it is stale. Fix: ``python tools/gen_settings_doc.py`` and commit docs/settings.md."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from kproducer.config import SETTINGS, canonical_name

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "gen_settings_doc.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings_doc", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_settings_doc_is_up_to_date() -> None:
    current = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    assert _generator().render() == current, "docs/settings.md is stale: run python tools/gen_settings_doc.py"


def test_every_setting_and_spelling_is_documented() -> None:
    text = _generator().render()
    for java, setting in SETTINGS.items():
        assert f"| `{java}` |" in text, java
        row = next(line for line in text.splitlines() if line.startswith(f"| `{java}` |"))
        assert setting.doc.split(",")[0].replace("|", "\\|") in row, java
    spellings, refused = text.split("## Other spellings", 1)[1].split("## Other clients' settings without", 1)
    for line in spellings.splitlines():
        if line.startswith("| `"):
            name, java = (cell.strip().strip("`") for cell in line.split("|")[1:3])
            assert canonical_name(name) == java, line
    import pytest

    from kproducer.config import NO_EQUIVALENT
    from kproducer.errors import ConfigError

    listed = [line.split("|")[1].strip().strip("`") for line in refused.splitlines() if line.startswith("| `")]
    assert sorted(listed) == sorted(NO_EQUIVALENT)
    for name in listed:
        with pytest.raises(ConfigError, match="unknown producer setting") as info:
            canonical_name(name)
        assert NO_EQUIVALENT[name] in str(info.value)


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(_generator().render().replace("linger.ms", "linger.millis", 1), encoding="utf-8")
    run = subprocess.run([sys.executable, str(TOOL), "--check", "--output", str(stale)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1 and "linger.millis" in run.stdout and "gen_settings_doc.py" in run.stderr
    fixed = subprocess.run([sys.executable, str(TOOL), "--output", str(stale)], capture_output=True, text=True,
                           timeout=120)
    assert fixed.returncode == 0
    again = subprocess.run([sys.executable, str(TOOL), "--check", "--output", str(stale)], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stdout


# -- docs/migration.md: what it says is accepted is accepted, what it says must be renamed is refused --------

MIGRATION = REPO / "docs" / "migration.md"

KAFKA_PYTHON_KWARGS = dict(
    bootstrap_servers="127.0.0.1:9092", acks="all", linger_ms=0, batch_size=16384, buffer_memory=1 << 25,
    max_block_ms=1000, max_request_size=1 << 20, request_timeout_ms=30000, retries=5, retry_backoff_ms=100,
    compression_type=None, enable_idempotence=True, max_in_flight_requests_per_connection=5,
    metadata_max_age_ms=300000, connections_max_idle_ms=540000, security_protocol="SASL_SSL", ssl_cafile=None,
    ssl_check_hostname=True, ssl_ciphers=None, sasl_mechanism="PLAIN", sasl_plain_username="u",
    sasl_plain_password="p",
)
LIBRDKAFKA_SETTINGS = {
    "bootstrap.servers": "127.0.0.1:9092", "client.id": "c", "acks": "all", "linger.ms": 5,
    "compression.type": "none", "enable.idempotence": True, "transaction.timeout.ms": 60000, "retries": 3,
    "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000, "max.in.flight.requests.per.connection": 5, "metadata.max.age.ms": 1000,
    "security.protocol": "SASL_SSL", "ssl.endpoint.identification.algorithm": "https",
    "enable.ssl.certificate.verification": True, "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u",
    "sasl.password": "p", "statistics.interval.ms": 1000, "stats_cb": print,
}
#: other clients' names the page says are accepted as kproducer's: (name, a value, kproducer's setting, its value)
ACCEPTED = [("max_batch_size", 1000, "batch_size", 1000), ("queue.buffering.max.ms", 7, "linger_ms", 7),
            ("compression.codec", "gzip", "compression_type", 1),
            ("message.timeout.ms", 200000, "delivery_timeout_ms", 200000),
            ("message.timeout.ms", 0, "delivery_timeout_ms", 2147483647),
            ("socket.timeout.ms", 20000, "request_timeout_ms", 20000),
            ("message.max.bytes", 1000000, "max_request_size", 1000000), ("message.send.max.retries", 3, "retries", 3),
            ("request.required.acks", "all", "acks", -1), ("queue.buffering.max.kbytes", 1024, "buffer_memory", 1 << 20),
            ("socket.send.buffer.bytes", 0, "send_buffer_bytes", -1),
            ("socket.receive.buffer.bytes", 65536, "receive_buffer_bytes", 65536)]
#: names the page says are refused (no equivalent)
RENAMED = ["api_version", "batch.num.messages", "queue.buffering.max.messages", "log_cb", "throttle_cb",
           "oauth_cb", "debug", "compression.level"]


def test_migration_settings_claims_hold() -> None:
    import pytest

    from kproducer.config import ProducerConfig
    from kproducer.errors import ConfigError

    text = MIGRATION.read_text(encoding="utf-8")
    cfg = ProducerConfig(**KAFKA_PYTHON_KWARGS)
    assert cfg.compression_type == 0 and cfg.sasl_login is not None
    ProducerConfig(LIBRDKAFKA_SETTINGS)
    for name in list(KAFKA_PYTHON_KWARGS) + list(LIBRDKAFKA_SETTINGS):
        assert f"`{name}`" in text or name in ("bootstrap_servers", "bootstrap.servers"), name
    for name in RENAMED:
        assert f"`{name}" in text, name
        with pytest.raises(ConfigError, match="unknown producer setting"):
            ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", name: 1})
    for name, value, ours, expected in ACCEPTED:
        assert f"`{name}`" in text, name
        for spelling in (name, name.replace(".", "_")):
            cfg = ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", spelling: value})
            assert getattr(cfg, ours) == expected, (spelling, value)
            assert spelling in cfg.spelled.values()


def test_migration_mock_cluster_example_runs() -> None:
    text = MIGRATION.read_text(encoding="utf-8")
    block = text.split("## Checking a migration", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    code = "\n".join(line[2:] if line.startswith("  ") else line for line in block.splitlines())
    from kproducer import Producer

    exec(compile(code, str(MIGRATION), "exec"), {"Producer": Producer})  # noqa: S102 - our own docs
