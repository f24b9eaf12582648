"""Names vulture reports as unused that are used where it cannot see (run: `vulture`, configured in
pyproject.toml; CI runs it in .ci/run). Each line names the object so vulture counts it as used; say why.
Remove a line when its name goes away; add one only for a use outside Python's view, never to hide dead
code (delete that instead)."""
# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

_ = object()

# argparse: attributes set on sub-parsers / actions, read by argparse itself
_.required
_.help

# signatures fixed by the caller: signal handlers and context managers' __exit__
signum
exc_type

# fields of named tuples / dataclasses: part of the value (repr, equality, users' code)
rack  # network.metadata.Node
isr  # network.metadata.PartitionInfo
batch_base_offset  # mock.log.StoredRecord
has_topic  # spark._schema.ColumnPlan

# protocol constants kept for readers and users (Kafka's names for the wire values)
READ_UNCOMMITTED  # protocol.messages.fetch
READ_COMMITTED
EARLIEST_TIMESTAMP  # protocol.messages.list_offsets
LATEST_TIMESTAMP
MAX_TIMESTAMP

# PySpark's DataSource API: called by Spark for streaming writes
_.streamWriter

# the mock broker (being reorganised by issue 13's mock work; decide there): a counter and a query
# nothing reads yet
_.size_bytes  # mock.log.PartitionLog
_.pending_requests  # mock.request_channel.RequestChannel

# pytest: fixtures found by name (autouse, or requested by parameter name)
no_internal_errors  # tests/conftest.py, autouse
markers_tell_the_truth  # tests/conftest.py, autouse
no_secrets_logged  # tests/integration/test_security_mock.py
forget_loaded_modules  # tests/unit/test_compression.py
Duplicate  # tests/unit/test_errors.py: classes whose definition is the test (it must raise)
NotInTable
ABORT_MARKER  # tests/integration/test_transactions_property_mock.py: named beside COMMIT_MARKER

# tests/spark/spark_standalone.py: read by hand when a standalone-cluster test fails (debug aid)
_.executor_logs

# benchmarks/conftest.py, tests/conftest.py: pytest hooks, called by name
pytest_configure
pytest_runtest_makereport
pytest_runtest_protocol
pytest_pycollect_makemodule  # tests/spark/conftest.py, without pyspark
_.runtest  # (its pytest.Item: pytest runs it)
_.reportinfo
_.benchmark_enable

# tests/apache_kafka/: pytest fixtures asked for by name (@pytest.mark.usefixtures)
restore  # test_failover_ak.py: every broker runs again after the test
no_secret_logged  # test_security_ak.py: no password in any log line of the test
ak_three  # test_mock_parity_produce_ak.py: asked for with request.getfixturevalue

# tests/unit/test_plugins.py: a plug-in class loaded by its dotted name (partitioner.class)
FailingConfigure

# kproducer/aio.py: RecordFuture is read by asyncio itself (gather() reads _cancel_message on Python 3.9-3.10)
_._cancel_message

# kproducer/config.py: OIDC settings the Config fields declare but oauth_settings() reads by their dotted names
sasl_oauthbearer_client_credentials_client_id
sasl_oauthbearer_client_credentials_client_secret
sasl_oauthbearer_scope

# kproducer/aio.py: asyncio reads RecordFuture._asyncio_future_blocking (isfuture(), wait_for())
_._asyncio_future_blocking

# tests/oauth_idp.py: http.server calls the request handler's methods and reads the server's flag by name
_.log_message
_.do_GET
_.do_POST
_.daemon_threads

# tests/apache_kafka/test_delegation_token_ak.py: a pytest fixture asked for by parameter name
alice_may_write

# tests/integration/test_transactions_hypothesis_mock.py: hypothesis's pretty printer calls _repr_pretty_ to show
# a failing program one step per line
_._repr_pretty_

# kproducer/protocol/accel.py: a module's __getattr__ (PEP 562), called by Python for accel.IMPLEMENTATION
__getattr__
