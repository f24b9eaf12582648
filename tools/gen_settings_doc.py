#!/usr/bin/env python3
"""Write docs/settings.md, the reference of every producer setting, from kproducer/config.py.

kproducer/config.py is the source: each ``Setting`` (Java name, default, kind of values with its range or
choices, description) becomes a row, and the other spellings config.py accepts (kafka-python's and librdkafka's
names, ``partitioner.class``) a table of their own. Nothing in docs/settings.md is written by hand.

Usage::

    python tools/gen_settings_doc.py            # rewrite docs/settings.md
    python tools/gen_settings_doc.py --check    # exit 1 (and show a diff) if docs/settings.md is stale

tests/unit/test_settings_doc.py fails while the file is stale; after adding or changing a setting in
config.py, run the first command and commit docs/settings.md with the change.
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
SETTINGS_MD = REPO / "docs" / "settings.md"
COMMAND = "python tools/gen_settings_doc.py"

_INT_MAX = 2147483647
_LONG_MAX = (1 << 63) - 1

def _load_config() -> Any:
    sys.path.insert(0, str(REPO))
    try:
        import kproducer.config as config
    finally:
        sys.path.pop(0)
    return config


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value == _INT_MAX and isinstance(value, int):
        return "`2147483647` (Integer.MAX_VALUE)"
    if value == _LONG_MAX and isinstance(value, int):
        return "`9223372036854775807` (Long.MAX_VALUE)"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _kind(setting: Any) -> str:
    return str(setting.kind.values)


def _section(java: str) -> str:
    if java.startswith("ssl.") or java == "enable.ssl.certificate.verification":
        return "TLS"
    if java.startswith(("sasl.", "https.")):
        return "SASL"
    if java.startswith(("metrics.", "statistics.")) or java == "stats_cb":
        return "Metrics"
    return "General"


def render() -> str:
    """The text docs/settings.md should have."""
    config = _load_config()
    settings = list(config.SETTINGS.values())
    aliases: Dict[str, str] = dict(config._ALIASES)
    value_maps: Dict[str, Any] = dict(getattr(config, "_VALUE_MAPS", {}))
    lines: List[str] = [
        "# Producer settings",
        "",
        f"<!-- Generated from kproducer/config.py by `{COMMAND}`; do not edit by hand. -->",
        "",
        "Every setting can be given by its Java name (`\"linger.ms\"`, in a dict) or its Python alias (`linger_ms=`,",
        "as a keyword); other projects' names are listed at the end. Unknown names raise `ConfigError` naming the",
        "closest setting. Defaults are Java's unless the description says otherwise; some are adjusted when",
        "settings are combined (e.g. `delivery.timeout.ms` is raised to `linger.ms + request.timeout.ms`, and",
        "idempotence gives way to `acks` or `retries` set explicitly) -- see kproducer/config.py.",
        "",
        f"Regenerate after changing kproducer/config.py: `{COMMAND}` (`--check` tells whether it is stale).",
        "",
    ]
    sections: Dict[str, List[Any]] = {}
    for s in settings:
        sections.setdefault(_section(s.java), []).append(s)
    for title in ("General", "TLS", "SASL", "Metrics"):
        rows = sections.get(title)
        if not rows:
            continue
        lines += [f"## {title}", "", "| setting | Python alias | default | values | description |",
                  "| --- | --- | --- | --- | --- |"]
        for s in rows:
            alias = f"`{s.alias}`" if s.alias != s.java else "(same)"
            lines.append(f"| `{s.java}` | {alias} | {_cell(_default(s.default))} | {_cell(_kind(s))} | "
                         f"{_cell(str(s.doc))} |")
        lines.append("")
    others: List[Tuple[str, str, bool]] = []
    for name, java in aliases.items():
        setting = config.SETTINGS.get(java)
        if setting is not None and name == setting.alias:
            continue
        others.append((name, java, name in value_maps))
    if others:
        lines += ["## Other spellings", "",
                  "Names other clients use for the same settings (kafka-python's with underscores, librdkafka's",
                  "dotted, each also with underscores).", "",
                  "| name | is | value |", "| --- | --- | --- |"]
        for name, java, mapped in sorted(others):
            how = "as is"
            if mapped:
                doc = (getattr(value_maps[name], "__doc__", None) or "").strip().splitlines()
                how = _cell(doc[0]) if doc else "converted"
            lines.append(f"| `{name}` | `{java}` | {how} |")
        lines.append("")
    refused: Dict[str, str] = dict(getattr(config, "NO_EQUIVALENT", {}))
    if refused:
        lines += ["## Other clients' settings without an equivalent", "",
                  "Refused with `ConfigError` (as any unknown name), with this advice:", "",
                  "| name | instead |", "| --- | --- |"]
        for name, advice in sorted(refused.items()):
            lines.append(f"| `{name}` | {_cell(advice)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date; write nothing")
    parser.add_argument("--output", type=Path, default=SETTINGS_MD, help="the file (default docs/settings.md)")
    args = parser.parse_args(argv)
    text = render()
    path: Path = args.output
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if args.check:
        if current == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                   str(path), "generated"))
        print(f"\n{path} is out of date: run {COMMAND}", file=sys.stderr)
        return 1
    if current != text:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
