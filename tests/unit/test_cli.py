"""The ``kproducer`` command line: argument parsing, ``produce`` and ``perf`` against a MockCluster."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from kproducer import cli
from kproducer.errors import ConfigError
from kproducer.mock import MockCluster, StoredRecord
from kproducer.perf import make_payload, percentile, run_perf

REPO = Path(__file__).resolve().parents[2]
FAST = ["-X", "linger.ms=1"]


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=1) as c:
        c.create_topic("t", 3)
        yield c


def records(cluster: MockCluster, topic: str = "t") -> List[StoredRecord]:
    out: List[StoredRecord] = []
    for p in range(cluster.partition_count(topic)):
        out.extend(cluster.records(topic, p))
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- parsing ------------------------------------------------------------------------------------

def test_key_value() -> None:
    assert cli.key_value("linger.ms=5") == ("linger.ms", "5")
    assert cli.key_value("a=b=c") == ("a", "b=c")
    assert cli.key_value("empty=") == ("empty", "")
    for bad in ("novalue", "=x", ""):
        with pytest.raises(Exception):
            cli.key_value(bad)


def test_parse_produce_options() -> None:
    args = cli.build_parser().parse_args(
        ["produce", "--bootstrap", "h:1", "--topic", "t", "-K", ":", "-H", "a=1", "--header", "b=2",
         "--acks", "1", "--compression", "gzip", "-X", "linger.ms=7", "--producer-prop", "batch.size=100"])
    assert args.command == "produce" and args.bootstrap == "h:1" and args.topic == "t"
    assert args.key_separator == ":" and args.headers == [("a", "1"), ("b", "2")]
    assert args.acks == "1" and args.compression == "gzip"
    assert args.producer_props == [("linger.ms", "7"), ("batch.size", "100")]


def test_parse_perf_defaults() -> None:
    args = cli.build_parser().parse_args(["perf", "--num-records", "10", "--record-size", "5"])
    assert args.topic == "kproducer-perf" and args.bootstrap is None and args.throughput == -1
    assert not args.json and not args.batch


def test_properties_file_and_props(tmp_path: Path) -> None:
    f = tmp_path / "p.properties"
    f.write_text("# comment\n\nlinger.ms = 9\nbatch_size:100\n")
    assert cli.read_properties(str(f)) == {"linger.ms": "9", "batch_size": "100"}
    args = cli.build_parser().parse_args(["perf", "-n", "1", "-s", "1", "--producer-config", str(f),
                                          "-X", "batch.size=200"])
    assert cli._settings(args) == {"linger.ms": "9", "batch.size": "200"}


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert cli.main(["produce", "--topic", "t"]) == 2  # no bootstrap
    assert "no brokers" in capsys.readouterr().err
    assert cli.main(["perf", "-n", "1", "-s", "1", "-X", "linger.mss=3"]) == 2
    assert "did you mean 'linger.ms'" in capsys.readouterr().err
    assert cli.main(["perf", "-n", "1", "-s", "1", "-X", "acks=2"]) == 2
    assert "acks must be 0, 1 or 'all'" in capsys.readouterr().err
    assert cli.main(["perf", "-n", "1", "-s", "1", "-X", "nonsense"]) == 2
    assert cli.main(["produce", "-b", "h:1", "-t", "t", "--acks", "1", "-X", "acks=0"]) == 2
    assert "given both" in capsys.readouterr().err
    assert cli.main(["--version"]) == 0
    assert "kproducer" in capsys.readouterr().out


def test_mock_cluster_delegates_to_mock_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mock-cluster", "--help"]) == 0
    assert "--brokers" in capsys.readouterr().out
    assert cli.main(["mock-cluster", "--brokers", "0"]) == 2


# -- produce ------------------------------------------------------------------------------------

def test_produce_file_with_keys_and_headers(cluster: MockCluster, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.txt"
    data.write_bytes(b"k1:v1\nk2:v:2\r\nk1:\n:only-value\nk3:last")
    rc = cli.main(["produce", "--bootstrap", cluster.bootstrap_servers, "--topic", "t", "--file", str(data),
                   "--key-separator", ":", "-H", "source=cli", "-H", "n=1", "-v", *FAST])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    got = sorted(((r.key, r.value, tuple(r.headers)) for r in records(cluster)), key=repr)
    hdrs = (("source", b"cli"), ("n", b"1"))
    assert got == sorted([(b"k1", b"v1", hdrs), (b"k2", b"v:2", hdrs), (b"k1", b"", hdrs),
                          (b"", b"only-value", hdrs), (b"k3", b"last", hdrs)], key=repr)
    assert "5 delivered, 0 failed" in captured.err
    assert len([x for x in captured.out.splitlines() if x.startswith("t-")]) == 5
    # keyed records are partitioned by key: both k1 records share a partition
    k1 = {p for p in range(3) for r in cluster.records("t", p) if r.key == b"k1"}
    assert len(k1) == 1


def test_produce_stdin_without_keys(cluster: MockCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n\nc\n")))
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-p", "2", "--acks", "1", *FAST])
    assert rc == 0
    assert [(r.key, r.value) for r in cluster.records("t", 2)] == [(None, b"a"), (None, b"b"), (None, b""),
                                                                    (None, b"c")]


def test_produce_line_without_separator_fails(cluster: MockCluster, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.txt"
    data.write_bytes(b"k:v\nno separator here\nk:w\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-f", str(data), "-K", ":", *FAST])
    assert rc == 1
    assert "line 2: no key separator" in capsys.readouterr().err
    assert sorted(r.value or b"" for r in records(cluster)) == [b"v", b"w"]


def test_produce_too_large_record_fails_others_delivered(cluster: MockCluster, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.txt"
    data.write_bytes(b"small\n" + b"x" * 5000 + b"\nsmall2\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-f", str(data),
                   "-X", "max.request.size=1000", *FAST])
    assert rc == 1
    assert "line 2: delivery failed: MessageTooLargeError" in capsys.readouterr().err
    assert sorted(r.value or b"" for r in records(cluster)) == [b"small", b"small2"]


def test_produce_broker_error_reported(cluster: MockCluster, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    cluster.inject_errors("produce", [29])  # TOPIC_AUTHORIZATION_FAILED: not retriable
    data = tmp_path / "in.txt"
    data.write_bytes(b"a\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-f", str(data), *FAST])
    assert rc == 1
    assert "line 1: delivery failed" in capsys.readouterr().err


def test_produce_unreachable_broker_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.txt"
    data.write_bytes(b"a\nb\n")
    start = time.monotonic()
    rc = cli.main(["produce", "-b", f"127.0.0.1:{free_port()}", "-t", "t", "-f", str(data),
                   "-X", "max.block.ms=300", "-X", "reconnect.backoff.ms=10", "--timeout", "1"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "NoBrokersAvailableError" in err and "giving up" in err
    assert time.monotonic() - start < 10


def test_produce_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["produce", "-b", "127.0.0.1:1", "-t", "t", "-f", str(tmp_path / "nope")])
    assert rc == 2
    assert "cannot read --file" in capsys.readouterr().err


# -- perf ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [False, True])
def test_perf_json_on_mock_cluster(batch: bool, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["perf", "--num-records", "2000", "--record-size", "50", "--json", "--reporting-interval", "0", *FAST]
    if batch:
        argv += ["--batch", "--chunk-size", "300"]
    rc = cli.main(argv)
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    assert doc["records"] == 2000 and doc["errors"] == 0 and doc["record_size"] == 50
    assert doc["mode"] == ("send_batch" if batch else "send")
    assert doc["records_per_sec"] > 0 and doc["bootstrap"] == "mock"
    assert 0 < doc["p50_ms"] <= doc["p95_ms"] <= doc["p99_ms"] <= doc["p999_ms"] <= doc["max_latency_ms"]


def test_perf_text_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["perf", "-n", "3000", "-s", "10", "--throughput", "6000", "--reporting-interval", "0.1",
                   *FAST])
    captured = capsys.readouterr()
    assert rc == 0
    assert "3000 records sent" in captured.out and "99.9th" in captured.out
    assert "records/sec" in captured.err  # progress lines


def test_perf_throttles() -> None:
    start = time.monotonic()
    result = run_perf("t", 1000, 10, throughput=2000, producer_props={"linger.ms": 1})
    took = time.monotonic() - start
    assert result.errors == 0 and result.latency_samples == 1000
    assert 0.45 <= result.elapsed_s and took < 10
    assert result.records_per_sec <= 2200


def test_perf_against_given_mock_bootstrap(cluster: MockCluster) -> None:
    result = run_perf("t", 500, 20, bootstrap=cluster.bootstrap_servers, producer_props={"linger.ms": "1"})
    assert result.errors == 0
    assert sum(cluster.high_watermark("t", p) for p in range(3)) == 500


def test_payload_and_percentile() -> None:
    p = make_payload(100)
    assert len(p) == 100 and p.isalpha() and p.isupper()
    assert percentile([], 0.5) == 0.0
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0
    assert percentile(values, 0.999) == 100.0


def test_run_perf_config_error() -> None:
    with pytest.raises(ConfigError):
        run_perf("t", 1, 1, producer_props={"linger.mss": 1})


# -- the installed entry points ----------------------------------------------------------------

def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_python_dash_m_and_mock_cluster_subprocess(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "kproducer", "mock-cluster", "--brokers", "2", "--topic",
                             "sub:4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # Ctrl-C stops it
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        assert bootstrap.count(",") == 1, bootstrap
        data = tmp_path / "in.txt"
        data.write_text("one\ntwo\n")
        done = subprocess.run([sys.executable, "-m", "kproducer", "produce", "-b", bootstrap, "-t", "sub",
                               "-f", str(data), "-v", *FAST], capture_output=True, text=True, env=_env(),
                              timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()  # (topic-partition@offset, tab, the input line: issue 30)
        assert len(lines) == 2 and all(x.startswith("sub-") for x in lines)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_produce_many_failures_are_summarized(cluster: MockCluster, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.txt"
    data.write_bytes(b"".join(b"no-separator %d\n" % i for i in range(50)) + b"k:v\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-f", str(data), "-K", ":", *FAST])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.count("no key separator") == 20
    assert "only their count is reported" in err and "1 delivered, 50 failed" in err


# -- security settings: --command-config and -X ---------------------------------------------------

SECRET = "cli-S3cret-pw"
JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        f'password="{SECRET}";')


@pytest.mark.parametrize("text,expected", [
    ("a=1\nb = 2\nc:3\nd : 4\ne 5\nf\t6\n", {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}),
    ("# comment\n! also a comment\n   # indented comment\n\n   \nk=v\n", {"k": "v"}),
    ("k=v # not a comment\n", {"k": "v # not a comment"}),
    ("k=first\nk=second\n", {"k": "second"}),
    ("empty=\nbare\nspaces =   \n", {"empty": "", "bare": "", "spaces": ""}),
    ("k = a=b:c\n", {"k": "a=b:c"}),
    ("k = = v\n", {"k": "= v"}),
    ("trailing = v  \n", {"trailing": "v  "}),
    ("long = one \\\n    two \\\n\tthree\n", {"long": "one two three"}),
    ("odd = ends\\\\\nnext = x\n", {"odd": "ends\\", "next": "x"}),
    ("last = dangling\\", {"last": "dangling"}),
    ("k\\=x\\:y\\ z = v\n", {"k=x:y z": "v"}),
    ("tab = a\\tb\\nc\\\\d\\e\n", {"tab": "a\tb\nc\\de"}),
    ("u = \\u0041\\u00e9\n", {"u": "A\u00e9"}),
    ("crlf = 1\r\nnext = 2\r\n", {"crlf": "1", "next": "2"}),
    ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
     "    username=\"alice\" \\\n    password=\"p w\";\n",
     {"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                          'password="p w";'}),
])
def test_parse_properties_like_java(text: str, expected: Dict[str, str]) -> None:
    assert cli.parse_properties(text) == expected


def test_parse_properties_errors_name_the_line_not_its_text() -> None:
    with pytest.raises(ConfigError) as info:
        cli.parse_properties(f"a=1\nsasl.password={SECRET}\\u12\n", "client.properties")
    assert "client.properties:2: malformed \\uxxxx escape" in str(info.value)
    assert SECRET not in str(info.value)


def test_read_properties_utf8_and_latin1(tmp_path: Path) -> None:
    f = tmp_path / "u.properties"
    f.write_bytes("\ufeffname=caf\u00e9\n".encode("utf-8"))
    assert cli.read_properties(str(f)) == {"name": "caf\u00e9"}
    f.write_bytes("name=caf\u00e9\n".encode("latin-1"))
    assert cli.read_properties(str(f)) == {"name": "caf\u00e9"}


def test_command_config_and_x_settings(tmp_path: Path) -> None:
    from kproducer.config import Password

    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                 f"sasl.jaas.config={JAAS}\n"
                 "ssl.truststore.location=/etc/ca.pem\nlinger.ms=9\n")
    for option in ("--command-config", "--producer-config", "--producer.config"):
        args = cli.build_parser().parse_args(["produce", "-t", "t", option, str(f), "-X", "ssl_check_hostname=false",
                                              "-X", "sasl.password=" + SECRET, "-X", "linger_ms=3"])
        settings = cli._settings(args)
        assert settings["security.protocol"] == "SASL_SSL" and settings["linger.ms"] == "3"  # -X wins
        assert settings["sasl.jaas.config"] == Password(JAAS)
        assert settings["sasl.password"] == Password(SECRET)
        assert settings["ssl.endpoint.identification.algorithm"] == ""
        assert SECRET not in repr(settings)


def test_x_spellings_of_one_setting_with_different_values(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["perf", "-n", "1", "-s", "1", "-X", "ssl.ca.location=a.pem", "-X", "ssl_cafile=b.pem"])
    assert rc == 2
    assert "ssl.ca.location and ssl_cafile are the same setting" in capsys.readouterr().err
    rc = cli.main(["perf", "-n", "1", "-s", "1", "-X", "sasl.password=" + SECRET, "-X",
                   "sasl_plain_password=other-" + SECRET])
    err = capsys.readouterr().err
    assert rc == 2 and "sasl.password and sasl_plain_password" in err and SECRET not in err


@pytest.mark.parametrize("extra", [
    ["-X", "sasl.jaas.config=" + JAAS[:-2]],  # unclosed quote
    ["-X", "sasl.jaas.config=" + JAAS.replace("required ", "")],  # no control flag
    ["-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=alice"],  # no password
])
def test_security_config_errors_exit_2_without_the_secret(extra: List[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["produce", "-b", "127.0.0.1:1", "-t", "t", "-X", "security.protocol=SASL_SSL",
                   "-X", "sasl.mechanism=SCRAM-SHA-256", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err
    assert SECRET not in err and SECRET[:-2] not in err


def test_produce_over_sasl_with_command_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MockCluster(1, security_protocol="SASL_PLAINTEXT", sasl_mechanisms=["SCRAM-SHA-256"],
                     users={"alice": SECRET}) as c:
        c.create_topic("t", 1)
        props = tmp_path / "client.properties"
        props.write_text("# as for kafka-console-producer --producer.config / --command-config\n"
                         "security.protocol = SASL_PLAINTEXT\nsasl.mechanism = SCRAM-SHA-256\n"
                         "sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                         f"    username=\"alice\" password=\"{SECRET}\";\n")
        data = tmp_path / "in.txt"
        data.write_text("one\ntwo\n")
        rc = cli.main(["produce", "-b", c.bootstrap_servers, "-t", "t", "-f", str(data), "--command-config",
                       str(props), *FAST])
        assert rc == 0, capsys.readouterr().err
        assert [r.value for r in c.records("t", 0)] == [b"one", b"two"]
        # the same with -X only and a wrong password: a delivery failure that names no secret
        rc = cli.main(["produce", "-b", c.bootstrap_servers, "-t", "t", "-f", str(data),
                       "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
                       "-X", "sasl.username=alice", "-X", "sasl.password=wrong-" + SECRET,
                       "-X", "max.block.ms=5000", "--timeout", "5", *FAST])
        err = capsys.readouterr().err
        assert rc == 1 and "SaslAuthenticationFailedError" in err
        assert SECRET not in err
        assert len(c.records("t", 0)) == 2


def test_x_without_equals_does_not_echo_the_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["perf", "-n", "1", "-s", "1", "-X", "sasl.password:" + SECRET]) == 2
    err = capsys.readouterr().err
    assert "expected NAME=VALUE" in err and SECRET not in err
    args = cli.build_parser().parse_args(["perf", "-n", "1", "-s", "1", "--producer-property", "acks=1"])
    assert args.producer_props == [("acks", "1")]
