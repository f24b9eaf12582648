"""The ``kproducer`` command (also ``python -m kproducer``).

Subcommands:

Both ``produce`` and ``perf`` take producer settings with ``--command-config FILE`` (a Java
``.properties`` file, as Kafka's tools take) and ``-X name=value`` (repeatable, like kcat; it wins over
the file): TLS and SASL settings included (docs/security.md). No message shows a secret value.

``kproducer produce``
    Send lines of stdin (or ``--file``) as records, like kafka-console-producer and ``kcat -P`` (whose
    ``-P``, ``-K <delim>`` and ``-H name=value`` it takes, also as ``kproducer -P ...``). With
    ``--key-separator`` (``-K``) each line is ``KEY<sep>VALUE``; kafka-console-producer's ``--property``
    settings (``parse.key``, ``key.separator``, ``parse.headers``, ``null.marker``, ...) read lines as its
    LineMessageReader does. Delivery errors go to stderr, with the input line number; ``-v`` prints each
    record's ``topic-partition@offset``, input line and key; long runs print a progress line every
    ``--reporting-interval`` seconds; the summary counts the lines read (delivered + failed + not
    delivered). The exit status is 1 when any record failed, 2 for bad arguments or settings, 0 otherwise.
``kproducer perf``
    A load generator like kafka-producer-perf-test: progress lines on stderr, then records/s, MB/s and
    latency percentiles (``--json`` for one JSON object on stdout). Runs against an in-process mock
    cluster when no ``--bootstrap`` is given.
``kproducer mock-cluster``
    Run an embedded Kafka-protocol cluster until Ctrl-C (see :mod:`kproducer.mock.cli`).
``kproducer apache-kafka``
    Run a real Apache Kafka cluster (from Apache Kafka's jars; Java 17+) on 127.0.0.1 until Ctrl-C (see
    :mod:`kproducer.testing.apache_kafka_cli`).
"""
from __future__ import annotations

import argparse
import difflib
import json
import logging
import re
import sys
import threading
import time
from typing import IO, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ._version import __version__
from .errors import ConfigError, KafkaError, KafkaTimeoutError, MessageTooLargeError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_SUBCOMMANDS = ("produce", "perf", "mock-cluster", "apache-kafka")


# -- argument helpers ---------------------------------------------------------------------------

def key_value(text: str) -> Tuple[str, str]:
    """``"name=value"`` -> (name, value); the value may contain ``=`` and be empty."""
    name, sep, value = text.partition("=")
    name = name.strip()
    # the argument is not echoed: it may be a secret given the wrong way (sasl.password:...)
    if not sep:
        raise argparse.ArgumentTypeError("expected NAME=VALUE, got an argument without '='")
    if not name:
        raise argparse.ArgumentTypeError("expected NAME=VALUE, got no NAME before '='")
    return name, value


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[Tuple[int, str]]:
    """(line number, logical line) of a .properties text: comments and blank lines dropped, a line
    ending in an odd number of backslashes joined with the next (whose leading white space is dropped)."""
    natural = text.splitlines()
    i = 0
    while i < len(natural):
        lineno = i + 1
        line = natural[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        parts: List[str] = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                parts.append(line[:-1])
                if i == len(natural):
                    break
                line = natural[i].lstrip(" \t\f")
                i += 1
                continue
            parts.append(line)
            break
        yield lineno, "".join(parts)


def _unescape(text: str, where: str) -> str:
    out: List[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{where}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_PROPERTY_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str, source: str = "properties") -> Dict[str, str]:
    """Parse Java ``.properties`` text as ``java.util.Properties.load`` does: ``key=value``, ``key: value``
    or ``key value``; ``#`` and ``!`` comment lines; a backslash at the end of a line continues it; ``\\``
    escapes (``\\t``, ``\\n``, ``\\uXXXX``, ``\\=``, ``\\:``, ``\\ `` ...). A later key wins. Error messages name
    the line, never its text (it may hold a password)."""
    return {key: value for _lineno, key, value in property_lines(text, source)}


def property_lines(text: str, source: str = "properties") -> List[Tuple[int, str, str]]:
    """(line number, key, value) of each property of a ``.properties`` text, in order (see
    :func:`parse_properties`)."""
    out: List[Tuple[int, str, str]] = []
    for lineno, line in _logical_lines(text):
        # the key ends at the first unescaped '=', ':' or white space
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key_raw = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        where = f"{source}:{lineno}"
        out.append((lineno, _unescape(key_raw, where), _unescape(rest, where)))
    return out


def read_properties(path: str) -> Dict[str, str]:
    """A Java-style ``.properties`` file (see :func:`parse_properties`), read as UTF-8 (Latin-1, Java's
    encoding, when the file is not valid UTF-8)."""
    return {key: value for _lineno, key, value in read_property_lines(path)}


def read_property_lines(path: str) -> List[Tuple[int, str, str]]:
    """(line number, key, value) of each property of a ``.properties`` file (see :func:`read_properties`)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    if text.startswith("\ufeff"):
        text = text[1:]
    return property_lines(text, path)


def _add_common(p: argparse.ArgumentParser, bootstrap_help: str) -> None:
    p.add_argument("-b", "--bootstrap", "--bootstrap-server", dest="bootstrap", metavar="HOST:PORT[,...]",
                   help=bootstrap_help)
    p.add_argument("-t", "--topic", required=True, help="topic to produce to")
    p.add_argument("-X", "--producer-prop", "--producer-property", dest="producer_props", action="append",
                   type=key_value, default=[], metavar="NAME=VALUE",
                   help="a producer setting by its Java, Python, librdkafka or kafka-python name (repeatable), "
                        "e.g. linger.ms=10 or security.protocol=SSL")
    p.add_argument("--command-config", "--producer-config", "--producer.config", dest="producer_config",
                   metavar="FILE",
                   help="a Java .properties file of producer settings, as Kafka's tools take (e.g. "
                        "security.protocol, sasl.jaas.config, ssl.truststore.location); -X wins over it")
    p.add_argument("--log-level", default="WARNING", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="log level of kproducer's own messages on stderr (default WARNING)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kproducer",
        description="kproducer: a pure-Python Kafka producer. Send records, measure throughput and latency, "
                    "or run a mock cluster.")
    parser.add_argument("--version", action="version", version=f"kproducer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    pr = sub.add_parser(
        "produce", help="send lines of stdin or a file as records (like kafka-console-producer / kcat -P)",
        description="Send each line of stdin (or --file) as one record. Exit status 1 when any record "
                    "failed, 2 for bad arguments or settings.")
    _add_common(pr, "brokers to bootstrap from (or bootstrap.servers in --producer-prop/--producer-config)")
    pr.add_argument("-P", dest="kcat_produce", action="store_true",
                    help="kcat's produce mode: accepted (kproducer -P ... is kproducer produce ...)")
    pr.add_argument("-f", "--file", help="read lines from this file instead of stdin (- for stdin)")
    pr.add_argument("-K", "--key-separator", metavar="SEP",
                    help="split each line at the first SEP into key and value, as kcat -K (a line without SEP "
                         "fails); the same as --property parse.key=true --property key.separator=SEP")
    pr.add_argument("-H", "--header", dest="headers", action="append", type=key_value, default=[],
                    metavar="NAME=VALUE", help="a header added to every record (repeatable)")
    pr.add_argument("--property", "--reader-property", dest="properties", action="append", type=key_value,
                    default=[], metavar="NAME=VALUE",
                    help="kafka-console-producer's line reader settings (repeatable): parse.key, key.separator "
                         "(default a tab), parse.headers, headers.delimiter (tab), headers.separator (,), "
                         "headers.key.separator (:), null.marker, ignore.error")
    pr.add_argument("--reporting-interval", type=float, default=5.0, metavar="SECONDS",
                    help="seconds between progress lines on stderr during long runs (default 5; 0 for none)")
    pr.add_argument("-p", "--partition", type=int, help="send every record to this partition")
    pr.add_argument("--acks", choices=["0", "1", "all", "-1"], help="acks (default all)")
    pr.add_argument("-z", "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                    help="compression.type (default none)")
    pr.add_argument("--linger-ms", type=int, help="linger.ms (default 5)")
    pr.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="give up waiting for acknowledgements after this long at the end (default: wait up "
                         "to delivery.timeout.ms)")
    pr.add_argument("-v", "--verbose", action="store_true",
                    help="print each record's topic-partition@offset, input line number and key to stdout "
                         "(tab-separated), and a summary to stderr")

    pf = sub.add_parser(
        "perf", help="producer load test (like kafka-producer-perf-test)",
        description="Send --num-records records of --record-size bytes and report records/s, MB/s and "
                    "latency (from send() to the delivery callback). Without --bootstrap an in-process "
                    "mock cluster is started and the topic created on it.")
    _add_common(pf, "brokers to bootstrap from (default: an in-process mock cluster)")
    pf.set_defaults(topic="kproducer-perf")
    for action in pf._actions:
        if action.dest == "topic":
            action.required = False
            action.help = "topic to produce to (default kproducer-perf)"
    pf.add_argument("-n", "--num-records", type=int, required=True, help="how many records to send")
    pf.add_argument("-s", "--record-size", type=int, help="bytes per record (or --payload-file)")
    pf.add_argument("--payload-file", help="use this file's contents as every record's value")
    pf.add_argument("--throughput", type=float, default=-1,
                    help="at most this many records/s (-1: unthrottled, the default)")
    pf.add_argument("--batch", action="store_true",
                    help="use send_batch() in chunks of --chunk-size records instead of send()")
    pf.add_argument("--chunk-size", type=int, default=1000, help="records per send_batch() call (default 1000)")
    pf.add_argument("--partitions", type=int, default=6,
                    help="partitions of the topic on the in-process mock cluster (default 6)")
    pf.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    pf.add_argument("--reporting-interval", type=float, default=5.0, metavar="SECONDS",
                    help="seconds between progress lines (default 5; 0 for none)")

    # listed for --help; `kproducer mock-cluster ...` is handed to kproducer.mock.cli.main before parsing
    sub.add_parser("mock-cluster", add_help=False,
                   help="run an embedded Kafka-protocol mock cluster (kproducer mock-cluster -h for options)")
    sub.add_parser("apache-kafka", add_help=False,
                   help="run a real Apache Kafka cluster on 127.0.0.1, from Apache Kafka's jars (needs Java 17+; "
                        "kproducer apache-kafka -h for options)")
    return parser


#: what a setting name looks like (Java's dotted names, the Python aliases, librdkafka's and kafka-python's names):
#: lower case words joined by '.' or '_'
_SETTING_NAME = re.compile(r"[a-z][a-z0-9]*(?:[._][a-z0-9]+)+")


def _canonical(name: str, value: Any, location: str) -> Tuple[str, Any]:
    """:func:`~kproducer.config.canonical_item`, with the location in its error. An unknown name is only shown
    when it looks like a setting name and has a value: a line or argument holding nothing but a secret (a pasted
    password, a continuation line of sasl.jaas.config that lost its backslash) is never echoed."""
    from .config import canonical_item

    try:
        return canonical_item(name, value)
    except ConfigError as e:
        if _SETTING_NAME.fullmatch(name) and value != "":
            raise ConfigError(f"{location}: {e}") from None
        raise ConfigError(f"{location}: not a 'name=value' producer setting (the text is not shown: it may hold "
                          "a secret; a value that goes on over several lines needs a backslash at the end of "
                          "each line but the last)") from None


def _merge(settings: Dict[str, Any], spelled: Dict[str, str], items: Iterable[Tuple[str, Any, str]],
           where: str) -> None:
    """Add ``items`` (name, value, location) to ``settings`` by Java name. Within one source a name given
    again wins; two spellings of one setting with different values are an error naming both."""
    from .config import Password, is_secret, reveal

    seen: Dict[str, Tuple[str, Any]] = {}
    for name, value, location in items:
        java, value = _canonical(name, value, location)
        if is_secret(java) and isinstance(value, str):
            value = Password(value)  # printed as [hidden] wherever the settings end up
        prior = seen.get(java)
        if prior is not None and prior[0] != name and reveal(prior[1]) != reveal(value):
            raise ConfigError(f"{where}: {prior[0]} and {name} are the same setting ({java}) with different "
                              "values; give it once")
        seen[java] = (name, value)
    for java, (name, value) in seen.items():
        settings[java] = value
        spelled[java] = name


def _settings(args: argparse.Namespace) -> Dict[str, Any]:
    """Producer settings by Java name from --command-config, then -X (which wins). Secret values are
    :class:`~kproducer.config.Password`."""
    settings: Dict[str, Any] = {}
    spelled: Dict[str, str] = {}
    if args.producer_config:
        try:
            props = read_property_lines(args.producer_config)
        except OSError as e:
            raise ConfigError(f"cannot read --command-config {args.producer_config}: {e.strerror}") from None
        _merge(settings, spelled, ((k, v, f"{args.producer_config}:{n}") for n, k, v in props),
               args.producer_config)
    _merge(settings, spelled, ((k, v, "-X") for k, v in args.producer_props), "-X")
    return settings


def _bootstrap(args: argparse.Namespace, settings: Dict[str, Any]) -> Optional[str]:
    if args.bootstrap:
        settings.pop("bootstrap.servers", None)
        return str(args.bootstrap)
    value = settings.pop("bootstrap.servers", None)
    return None if value is None else str(value)


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# -- produce ------------------------------------------------------------------------------------

class _Delivery:
    """Counts acknowledgements and failures; callbacks run on the producer's network thread. The first
    ``max_reports`` failures are reported one by one, the rest only in the final count."""

    def __init__(self, verbose: bool, out: IO[str], err: IO[str], max_reports: int = 20) -> None:
        self.verbose = verbose
        self.max_reports = max_reports
        self.out = out
        self.err = err
        self.lock = threading.Lock()
        self.delivered = 0
        self.failed = 0

    def callback(self, lineno: int, key: Optional[bytes]) -> Any:
        def done(md: Any, exc: Optional[BaseException]) -> None:
            with self.lock:
                if exc is None:
                    self.delivered += 1
                    if self.verbose:
                        # the offset with the input line (and key) it came from: lines complete out of order
                        where = f"{md.topic}-{md.partition}@{md.offset}\tline {lineno}"
                        if key is not None:
                            where += "\tkey " + key.decode("utf-8", "backslashreplace")
                        print(where, file=self.out)
                else:
                    self._report(lineno, f"delivery failed: {type(exc).__name__}: {exc}")
        return done

    def fail(self, lineno: int, why: str) -> None:
        with self.lock:
            self._report(lineno, why)

    def _report(self, lineno: int, why: str) -> None:  # the lock is held
        self.failed += 1
        if self.failed <= self.max_reports:
            print(f"kproducer: line {lineno}: {why}", file=self.err)
        elif self.failed == self.max_reports + 1:
            print("kproducer: more records failed; only their count is reported at the end", file=self.err)


#: kafka-console-producer's LineMessageReader settings (--property) and their defaults
_READER_DEFAULTS: Dict[str, str] = {
    "parse.key": "false", "key.separator": "\t", "parse.headers": "false", "headers.delimiter": "\t",
    "headers.separator": ",", "headers.key.separator": ":", "ignore.error": "false",
}
_READER_PROPERTIES = tuple(_READER_DEFAULTS) + ("null.marker",)

Headers = List[Tuple[str, Optional[bytes]]]


class LineReader:
    """A line as kafka-console-producer's LineMessageReader reads it: ``[headers<headers.delimiter>]
    [key<key.separator>]value``, headers as ``name<headers.key.separator>value`` joined by
    ``headers.separator`` (a literal string here; Kafka's tool takes a regular expression), a key, value,
    or header value equal to ``null.marker`` is null. :meth:`parse` raises ValueError for a line without a
    separator it needs, unless ``ignore.error`` (then, as Kafka's: no key, or a header without a value)."""

    def __init__(self, properties: Dict[str, str]) -> None:
        unknown = [name for name in properties if name not in _READER_PROPERTIES]
        if unknown:
            near = difflib.get_close_matches(unknown[0], _READER_PROPERTIES, n=1, cutoff=0.5)
            raise ConfigError(f"unknown --property {unknown[0]!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                              + f" (line reader settings: {', '.join(_READER_PROPERTIES)})")
        props = {**_READER_DEFAULTS, **properties}

        def flag(name: str) -> bool:
            return props[name].strip().lower() == "true"

        def sep(name: str) -> bytes:
            value = props[name].encode("utf-8")
            if not value:
                raise ConfigError(f"--property {name} must not be empty")
            return value

        self.parse_key = flag("parse.key")
        self.key_separator = sep("key.separator")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = sep("headers.delimiter")
        self.headers_separator = sep("headers.separator")
        self.headers_key_separator = sep("headers.key.separator")
        self.ignore_error = flag("ignore.error")
        marker = props.get("null.marker")
        self.null_marker = marker.encode("utf-8") if marker is not None else None
        # (Kafka's LineMessageReader.configure refuses the same pairs)
        pairs = [("headers.delimiter", "headers.separator"), ("headers.delimiter", "headers.key.separator"),
                 ("headers.separator", "headers.key.separator")]
        if marker is not None:
            pairs += [("null.marker", name) for name in ("key.separator", "headers.separator", "headers.delimiter",
                                                          "headers.key.separator")]
        for a, b in pairs:
            if props[a] == props[b]:
                raise ConfigError(f"--property {a} and {b} may not be equal")

    def _null(self, b: bytes) -> Optional[bytes]:
        return None if self.null_marker is not None and b == self.null_marker else b

    def parse(self, line: bytes) -> Tuple[Optional[bytes], Optional[bytes], Optional[Headers]]:
        """(key, value, headers) of one line."""
        headers: Optional[Headers] = None
        rest = line
        if self.parse_headers:
            text, found, after = line.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise ValueError(f"no headers delimiter {self.headers_delimiter.decode()!r} in the line")
            else:
                rest = after
                headers = self._headers(text)
        key: Optional[bytes] = None
        value: Optional[bytes] = rest
        if self.parse_key:
            k, found, v = rest.partition(self.key_separator)
            if found:
                key, value = self._null(k), v
            elif not self.ignore_error:
                raise ValueError(f"no key separator {self.key_separator.decode()!r} in the line")
        return key, self._null(value) if value is not None else None, headers

    def _headers(self, text: bytes) -> Optional[Headers]:
        if self.null_marker is not None and text == self.null_marker or not text:
            return None
        out: Headers = []
        for pair in text.split(self.headers_separator):
            name, found, value = pair.partition(self.headers_key_separator)
            if not found:
                if not self.ignore_error:
                    raise ValueError(f"no header key separator {self.headers_key_separator.decode()!r} in the "
                                     f"header {pair.decode('utf-8', 'backslashreplace')!r}")
                out.append((pair.decode("utf-8", "backslashreplace"), None))
                continue
            if self.null_marker is not None and name == self.null_marker:
                raise ValueError("a header name may not be the null marker")
            out.append((name.decode("utf-8", "backslashreplace"), self._null(value)))
        return out


def _reader(args: argparse.Namespace) -> LineReader:
    """The line reader of ``--property`` settings, with kcat's ``-K SEP`` (parse.key=true, key.separator=SEP)."""
    props: Dict[str, str] = {}
    for name, value in args.properties:
        props[name] = value
    if args.key_separator is not None:
        if args.key_separator == "":
            raise ConfigError("--key-separator must not be empty")
        given = props.get("key.separator")
        if given is not None and given != args.key_separator:
            raise ConfigError(f"-K {args.key_separator!r} and --property key.separator={given!r} disagree; give one")
        if props.get("parse.key", "true").strip().lower() != "true":
            raise ConfigError("-K (split a key off each line) and --property parse.key=false disagree; give one")
        props["key.separator"] = args.key_separator
        props["parse.key"] = "true"
    return LineReader(props)


def _lines(stream: IO[bytes]) -> Iterable[bytes]:
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


def cmd_produce(args: argparse.Namespace, stdin: Optional[IO[bytes]] = None) -> int:
    from . import Producer

    settings = _settings(args)
    bootstrap = _bootstrap(args, settings)
    if bootstrap is None:
        raise ConfigError("no brokers: give --bootstrap HOST:PORT (or bootstrap.servers=... in --producer-prop)")
    overrides: Dict[str, Any] = {"bootstrap.servers": bootstrap}
    if args.acks is not None:
        overrides["acks"] = args.acks
    if args.compression is not None:
        overrides["compression.type"] = args.compression
    if args.linger_ms is not None:
        overrides["linger.ms"] = args.linger_ms
    for name, value in overrides.items():
        if name in settings and str(settings[name]) != str(value):
            raise ConfigError(f"{name} is given both as an option ({value}) and as a producer setting "
                              f"({settings[name]}); give it once")
        settings[name] = value
    fixed: Headers = [(k, v.encode("utf-8")) for k, v in args.headers]
    reader = _reader(args)
    if args.reporting_interval < 0:
        raise ConfigError("--reporting-interval must not be negative")

    producer = Producer(settings)
    delivery = _Delivery(args.verbose, sys.stdout, sys.stderr)
    stream: IO[bytes]
    close_stream = False
    if args.file and args.file != "-":
        try:
            stream = open(args.file, "rb")
        except OSError as e:
            producer.close(0)
            raise ConfigError(f"cannot read --file: {e}") from None
        close_stream = True
    else:
        stream = stdin if stdin is not None else sys.stdin.buffer
    read = 0
    aborted = False
    started = time.monotonic()
    interval = args.reporting_interval
    next_report = started + interval if interval > 0 else float("inf")

    def progress() -> None:
        nonlocal next_report
        now = time.monotonic()
        next_report = now + interval
        done = delivery.delivered + delivery.failed
        print(f"kproducer: {read} lines read, {delivery.delivered} delivered, {delivery.failed} failed "
              f"({done / max(now - started, 1e-9):.0f} records/s)", file=sys.stderr, flush=True)

    try:
        for lineno, line in enumerate(_lines(stream), 1):
            read += 1
            if time.monotonic() >= next_report:
                progress()
            try:
                key, value, line_headers = reader.parse(line)
            except ValueError as e:
                delivery.fail(lineno, str(e))
                continue
            headers = fixed + line_headers if line_headers else fixed
            try:
                future = producer.send(args.topic, value, key=key, headers=headers or None, partition=args.partition,
                                       callback=delivery.callback(lineno, key))
                if future.failed() and not isinstance(future.exception(0), MessageTooLargeError):
                    # send() could not queue it (its callback reported why): metadata timeout, buffer
                    # exhausted; the rest would fail the same way
                    print("kproducer: giving up; the remaining lines were not sent", file=sys.stderr)
                    aborted = True
                    break
            except (MessageTooLargeError, ValueError, TypeError) as e:
                delivery.fail(lineno, f"{type(e).__name__}: {e}")
            except KafkaError as e:
                # metadata timeout, fatal producer error: the rest would fail the same way
                delivery.fail(lineno, f"{type(e).__name__}: {e}")
                print("kproducer: giving up; the remaining lines were not sent", file=sys.stderr)
                aborted = True
                break
        try:
            _flush(producer, args.timeout, interval, progress)
        except KafkaError as e:
            print(f"kproducer: {e}", file=sys.stderr)
            aborted = True
    except KeyboardInterrupt:
        print("kproducer: interrupted; sending what was read", file=sys.stderr)
        aborted = True
    finally:
        if close_stream:
            stream.close()
        producer.close(args.timeout if aborted else None)
    if args.verbose or aborted or delivery.failed > delivery.max_reports:
        # every line read is delivered, failed, or (given up, interrupted) neither
        unknown = read - delivery.delivered - delivery.failed
        print(f"kproducer: {read} record{'s' if read != 1 else ''} read: {delivery.delivered} delivered, "
              f"{delivery.failed} failed" + (f", {unknown} not delivered" if unknown > 0 else "")
              + f" (topic {args.topic})", file=sys.stderr)
    return EXIT_FAILED if delivery.failed or aborted else EXIT_OK


def _flush(producer: Any, timeout: Optional[float], interval: float, progress: Any) -> None:
    """producer.flush(timeout), with a progress line every ``interval`` seconds (0: none) while it waits."""
    if interval <= 0:
        producer.flush(timeout)
        return
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
        try:
            producer.flush(wait)
            return
        except KafkaTimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            progress()


# -- perf ---------------------------------------------------------------------------------------

def cmd_perf(args: argparse.Namespace) -> int:
    from .perf import run_perf

    if args.num_records < 1:
        raise ConfigError("--num-records must be at least 1")
    payload: Optional[bytes] = None
    if args.payload_file:
        try:
            with open(args.payload_file, "rb") as f:
                payload = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read --payload-file: {e}") from None
        record_size = len(payload)
    elif args.record_size is None:
        raise ConfigError("give --record-size BYTES (or --payload-file)")
    else:
        record_size = args.record_size
    if record_size < 0:
        raise ConfigError("--record-size must not be negative")
    if args.chunk_size < 1:
        raise ConfigError("--chunk-size must be at least 1")
    if args.partitions < 1:
        raise ConfigError("--partitions must be at least 1")
    settings = _settings(args)
    bootstrap = _bootstrap(args, settings)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = run_perf(
        args.topic, args.num_records, record_size, throughput=args.throughput, bootstrap=bootstrap,
        producer_props=settings, batch=args.batch, chunk_size=args.chunk_size, partitions=args.partitions,
        progress=progress if args.reporting_interval > 0 else None,
        progress_interval=args.reporting_interval or 5.0, payload=payload)
    if args.json:
        doc = result.as_dict()
        from .protocol.accel import IMPLEMENTATION

        doc.update(topic=args.topic, bootstrap=bootstrap or "mock", throughput_target=args.throughput,
                   implementation=IMPLEMENTATION)
        print(json.dumps(doc), flush=True)
    else:
        print(result.summary(), flush=True)
    return EXIT_FAILED if result.errors else EXIT_OK


# -- entry point --------------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] not in _SUBCOMMANDS and "-P" in args_list:
        args_list.insert(0, "produce")  # kcat's habit: kproducer -P -b ... -t ...
    if args_list and args_list[0] in ("mock-cluster", "apache-kafka"):
        # commands with parsers of their own, imported only when asked for
        if args_list[0] == "mock-cluster":
            from .mock.cli import main as command_main
        else:
            from .testing.apache_kafka_cli import main as command_main
        try:
            return command_main(args_list[1:])
        except SystemExit as e:  # its argparse: -h exits 0, usage errors 2
            return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
        except KeyboardInterrupt:
            return 130
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as e:  # argparse: --help/--version exit 0, usage errors 2
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    _setup_logging(args.log_level)
    try:
        if args.command == "produce":
            return cmd_produce(args)
        if args.command == "perf":
            return cmd_perf(args)
        parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse rejects it first
    except ConfigError as e:
        print(f"kproducer {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kproducer: interrupted", file=sys.stderr)
        return 130
    except KafkaError as e:
        print(f"kproducer {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_FAILED
    return EXIT_USAGE


__all__ = ["build_parser", "cmd_perf", "cmd_produce", "key_value", "main", "parse_properties", "property_lines",
           "read_properties", "read_property_lines"]
