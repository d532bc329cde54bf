"""Tables of the ranked-matching kind (docs/contract.md, "Tables").

Expression table: ``id`` int64, ``score`` double (optional, default 1.0), ``predicates``
list<struct<attr: string, op: string, value: string, weight: double>>, one element per
predicate; ``value`` is the operand as JSON text (``5``, ``"paris"``, ``[1, 2]`` for ``in``,
``[0, 10]`` for ``between``), because one column holds numbers, strings and lists.

Event table: ``id`` int64, ``values`` string (a JSON object: attribute -> number or string),
``weights`` string (a JSON object: attribute -> weight; optional, null for none).

In a JSONL file the same rows are written with native JSON (``"value": [0, 10]``,
``"values": {"x": 1}``); the reader turns them into the columns above. CSV cannot hold the
nested form: use Parquet or JSONL. Spark and pandas DataFrames with these columns work too.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from rankcast.errors import InvalidInput

__all__ = ["EXPRESSION_SCHEMA", "EVENT_SCHEMA", "PREDICATE_TYPE", "expressions_table", "events_table",
           "read_match_jsonl", "is_event_table", "MATCH_KINDS"]

MATCH_KINDS = ("expression", "event")
PREDICATE_TYPE = pa.struct([("attr", pa.string()), ("op", pa.string()), ("value", pa.string()),
                            ("weight", pa.float64())])
EXPRESSION_SCHEMA = pa.schema([("id", pa.int64()), ("score", pa.float64()), ("predicates", pa.list_(PREDICATE_TYPE))])
EVENT_SCHEMA = pa.schema([("id", pa.int64()), ("values", pa.string()), ("weights", pa.string())])


def _json(v) -> str:
    return json.dumps(list(v) if isinstance(v, tuple) else v)


def expressions_table(exprs) -> pa.Table:
    """``rc.Expression`` objects as an expression table."""
    rows = [{"id": e.id, "score": float(e.score),
             "predicates": [{"attr": p.attr, "op": p.op, "value": _json(p.value), "weight": float(p.weight)}
                            for p in e.predicates]} for e in exprs]
    return pa.Table.from_pylist(rows, schema=EXPRESSION_SCHEMA)


def events_table(events) -> pa.Table:
    """``rc.Event`` objects as an event table."""
    rows = [{"id": e.id, "values": json.dumps(dict(e.values)),
             "weights": None if e.weights is None else json.dumps(dict(e.weights))} for e in events]
    return pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)


def is_event_table(table: pa.Table) -> bool:
    """An event table (a ``values`` column): what a replay of a ranked-matching stream reads."""
    return "values" in table.column_names


def read_match_jsonl(path: Path, kind: str) -> pa.Table:
    """A JSONL file of expressions or events (native JSON values) as a table of the schema
    above; a line that is not a JSON object is named by its number."""
    from .sources import json_lines
    rows = []
    for pos, r in enumerate(json_lines(path, kind)):
        try:
            if kind == "expression":
                preds = r.get("predicates")
                rows.append({"id": r.get("id"), "score": r.get("score", 1.0),
                             "predicates": None if preds is None else
                             [{"attr": p.get("attr"), "op": p.get("op"), "value": _json(p.get("value")),
                               "weight": p.get("weight", 1.0)} for p in preds]})
            else:
                w = r.get("weights")
                rows.append({"id": r.get("id"), "values": json.dumps(r.get("values")),
                             "weights": None if w is None else json.dumps(w)})
        except (AttributeError, TypeError) as e:
            raise InvalidInput(f"{path}: {kind} #{pos}: malformed {kind}: {e}") from None
    try:
        return pa.Table.from_pylist(rows, schema=EXPRESSION_SCHEMA if kind == "expression" else EVENT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidInput(f"{path}: {kind} table: a column of the wrong type: {e}") from None
