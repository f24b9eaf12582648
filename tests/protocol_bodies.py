"""Complete message bodies for codec tests.

The encoder is strict (a missing field without a default is an error), so a test that only cares about
a few fields fills in the rest, explicitly, with :func:`full_response` (:meth:`Api.request_defaults` for a flat request): every
field the body leaves out, at any depth, gets its default or zero value.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Sequence

from kproducer.protocol.schema import Api, Field, Struct


def complete(fields: Sequence[Field], version: int, body: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of ``body`` with every missing field of ``fields`` at its default (nested structs too)."""
    out = dict(body)
    for f in fields:
        if f.name not in out:
            out[f.name] = copy.deepcopy(f.default_value(version))
            continue
        value = out[f.name]
        if value is None:
            continue
        if isinstance(f.type, list):
            out[f.name] = [complete(f.type, version, item) for item in value]
        elif isinstance(f.type, Struct):
            out[f.name] = complete(f.type.fields, version, value)
    return out


def full_response(api: Api, version: int, body: Dict[str, Any]) -> Dict[str, Any]:
    return complete(api.response_fields, version, body)
