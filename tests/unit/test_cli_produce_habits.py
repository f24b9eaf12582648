"""Issue 30 item 9: ``kproducer produce`` with the habits of kcat (``-P``, ``-K <delim>``, ``-H name=value``)
and of kafka-console-producer (``--property parse.key=true --property key.separator=: ``, ``parse.headers``,
``null.marker``, ``ignore.error``); progress lines on long runs; ``-v`` lines that name the input line and
key of each offset; an honest summary."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterator, List

import pytest

from kproducer import cli
from kproducer.mock import MockCluster, StoredRecord

FAST = ["-X", "linger.ms=1"]


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=1) as c:
        c.create_topic("t", 3)
        yield c


def records(cluster: MockCluster) -> List[StoredRecord]:
    return [r for p in range(3) for r in cluster.records("t", p)]


def _file(tmp_path: Path, data: bytes) -> str:
    f = tmp_path / "in.txt"
    f.write_bytes(data)
    return str(f)


def test_kcat_style_arguments(cluster: MockCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _file(tmp_path, b"k1:v1\nk2:v2\n")
    # kcat -P -b ... -t t -K: -H source=kcat (also without the subcommand, as kcat is called)
    rc = cli.main(["-P", "-b", cluster.bootstrap_servers, "-t", "t", "-K:", "-H", "source=kcat", "-f", data, *FAST])
    assert rc == 0, capsys.readouterr().err
    rc = cli.main(["produce", "-P", "-b", cluster.bootstrap_servers, "-t", "t", "-K", ":", "-f", data, *FAST])
    assert rc == 0, capsys.readouterr().err
    got = sorted((r.key, r.value, tuple(r.headers)) for r in records(cluster))
    assert got == [(b"k1", b"v1", ()), (b"k1", b"v1", (("source", b"kcat"),)), (b"k2", b"v2", ()),
                   (b"k2", b"v2", (("source", b"kcat"),))]


def test_console_producer_properties(cluster: MockCluster, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    data = _file(tmp_path, b"h1:a,h2:b\tk1:v1\nh1:c\tk2:v:2\n\tk3:v3\n")
    rc = cli.main(["produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "t",
                   "--property", "parse.key=true", "--property", "key.separator=:",
                   "--property", "parse.headers=true", "-f", data, *FAST])
    assert rc == 0, capsys.readouterr().err
    got = sorted((r.key, r.value, tuple(r.headers)) for r in records(cluster))
    assert got == [(b"k1", b"v1", (("h1", b"a"), ("h2", b"b"))), (b"k2", b"v:2", (("h1", b"c"),)),
                   (b"k3", b"v3", ())]


def test_console_producer_defaults_null_marker_and_ignore_error(cluster: MockCluster, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # key.separator defaults to a tab, as in kafka-console-producer
    data = _file(tmp_path, b"k1\tv1\nNULL\tv2\nk3\tNULL\nno separator\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "--property", "parse.key=true",
                   "--property", "null.marker=NULL", "--property", "ignore.error=true", "-f", data, *FAST])
    assert rc == 0, capsys.readouterr().err
    got = sorted(((r.key, r.value) for r in records(cluster)), key=repr)
    assert got == sorted([(b"k1", b"v1"), (None, b"v2"), (b"k3", None), (None, b"no separator")], key=repr)


def test_unknown_property_and_conflicting_separators_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["produce", "-b", "127.0.0.1:1", "-t", "t", "--property", "parse.keys=true"]) == 2
    err = capsys.readouterr().err
    assert "parse.keys" in err and "parse.key" in err
    assert cli.main(["produce", "-b", "127.0.0.1:1", "-t", "t", "-K", ":", "--property", "parse.key=true",
                     "--property", "key.separator=|"]) == 2
    assert "key.separator" in capsys.readouterr().err


def test_verbose_lines_name_the_input_line_and_key(cluster: MockCluster, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = _file(tmp_path, b"a:1\nb:2\nbroken\nc:3\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-K", ":", "-v", "-f", data, *FAST])
    captured = capsys.readouterr()
    assert rc == 1
    lines = [x for x in captured.out.splitlines() if x.startswith("t-")]
    assert len(lines) == 3
    by_line = {}
    for x in lines:
        m = re.fullmatch(r"t-(\d)@(\d+)\tline (\d+)\tkey (\S+)", x)
        assert m, x
        by_line[int(m.group(3))] = (int(m.group(1)), int(m.group(2)), m.group(4))
    assert sorted(by_line) == [1, 2, 4]
    stored = {(r.key, r.value): r.offset for r in records(cluster)}
    assert by_line[1][1] == stored[(b"a", b"1")] and by_line[1][2] == "a"
    assert by_line[4][2] == "c"


def test_the_summary_counts_what_was_read(cluster: MockCluster, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = _file(tmp_path, b"a:1\nbroken\nc:3\n")
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-K", ":", "-v", "-f", data, *FAST])
    assert rc == 1
    err = capsys.readouterr().err
    assert "3 records read: 2 delivered, 1 failed" in err, err
    assert "2 records sent" not in err


def test_a_long_run_prints_progress_lines(cluster: MockCluster, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = _file(tmp_path, b"".join(b"k%d:v\n" % i for i in range(5000)))
    rc = cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-K", ":", "-f", data,
                   "--reporting-interval", "0.001", *FAST])
    assert rc == 0
    err = capsys.readouterr().err
    progress = [x for x in err.splitlines() if "lines read" in x and "records/s" in x]
    assert progress, err
    assert re.search(r"\d+ lines read, \d+ delivered, \d+ failed", progress[0])
    assert len(records(cluster)) == 5000


def test_no_progress_lines_by_default_on_a_short_run(cluster: MockCluster, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    data = _file(tmp_path, b"a\nb\n")
    assert cli.main(["produce", "-b", cluster.bootstrap_servers, "-t", "t", "-f", data, *FAST]) == 0
    assert capsys.readouterr().err == ""
    assert sys.stdout is not None
