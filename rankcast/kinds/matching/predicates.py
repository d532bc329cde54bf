"""Validation and columnar form of the ranked-matching kind (docs/contract.md, "Ranked matching").

A call's expressions or events are checked item by item (an error names the item's position,
its id and the field, for example ``expression #3 (id=17): field 'predicates[1].value'``) and
turned into flat columns, before anything of the call takes effect.

Attributes get an id and a type (numbers or strings) the first time a call that succeeds
names them; string values get integer codes per attribute, so that every predicate becomes
an interval of float64 over its attribute (BE*-tree paper, Table I): ``x < v`` is
``[-inf, v)`` (closed at the float just below ``v``), ``x == v`` is ``[v, v]``, ``x in S`` is
``[min S, max S]``, and ``!=`` / ``not in`` are the whole line; the interval is the index key,
and every candidate is then checked exactly (:func:`rankcast.kinds.matching.core.evaluate`).
A string an event carries that no expression named gets the code -1: it equals no value.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from rankcast.common.arrays import concat_offsets, runs
from rankcast.common.validation import INT64_MAX, INT64_MIN
from rankcast.common.validation import item_error, over_limit, plain, too_many
from rankcast.config import Limits, limits
from rankcast.errors import InvalidInput
from rankcast.model import OPERATORS, Event, Expression, Predicate

__all__ = ["OP_CODES", "AttributeTable", "ExpressionBatch", "EventBatch", "encode_expressions",
           "encode_events", "check_expression_ids"]

OP_CODES = {op: i for i, op in enumerate(OPERATORS)}
LT, LE, EQ, NE, GE, GT, IN, NIN, BETWEEN = range(9)
NUM, STR = 0, 1
_KIND_NAME = ("numbers", "strings")
UNKNOWN_CODE = -1.0


class AttributeTable:
    """Attribute names -> ids and types, and string values -> codes, per attribute.

    Encoding a call records what it would add in a :class:`_Pending`; ``commit`` applies it
    once the whole call is valid (a failed call leaves the table as it was)."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.kinds: list[int] = []
        self.codes: list[dict[str, int]] = []

    def __len__(self) -> int:
        return len(self.kinds)

    def commit(self, pending: "_Pending") -> None:
        """Apply what a call added (idempotent: a bulk load commits its parts when staging
        them, and again when its log record is applied)."""
        for name, kind in pending.new_attrs:
            if name not in self.ids:
                self.ids[name] = len(self.kinds)
                self.kinds.append(kind)
                self.codes.append({})
        for a, strings in pending.new_codes.items():
            codes = self.codes[a]
            for s in strings:
                if s not in codes:
                    codes[s] = len(codes)

    def mark(self) -> tuple:
        """What :meth:`rollback` returns to (a bulk load commits its parts as it stages them)."""
        return len(self.kinds), [len(c) for c in self.codes]

    def rollback(self, mark: tuple) -> None:
        n, lens = mark
        for name in [k for k, i in self.ids.items() if i >= n]:
            del self.ids[name]
        del self.kinds[n:], self.codes[n:]
        for codes, keep in zip(self.codes, lens):
            for s in [s for s, c in codes.items() if c >= keep]:
                del codes[s]


class _Pending:
    """What one call adds to an :class:`AttributeTable`, looked up before committed state."""

    def __init__(self, table: AttributeTable):
        self.table = table
        self.new_attrs: list[tuple[str, int]] = []
        self._new_ids: dict[str, int] = {}
        self.new_codes: dict[int, dict[str, int]] = {}

    def attr(self, name: str, kind: int, where) -> int:
        """The id of attribute ``name`` holding ``kind`` values; ``where`` = (what, pos, id,
        field) names the item in the error of a type clash."""
        t = self.table
        a = t.ids.get(name)
        if a is None:
            a = self._new_ids.get(name)
            if a is None:
                a = len(t.kinds) + len(self.new_attrs)
                self._new_ids[name] = a
                self.new_attrs.append((name, kind))
                return a
            have = self.new_attrs[a - len(t.kinds)][1]
        else:
            have = t.kinds[a]
        if have != kind:
            raise item_error(*where, f"attribute {name!r} holds {_KIND_NAME[have]}, "
                                     f"got {_KIND_NAME[kind][:-1]}")
        return a

    def code(self, a: int, s: str, register: bool) -> float:
        t = self.table
        if a < len(t.codes):
            c = t.codes[a].get(s)
            if c is not None:
                return float(c)
            base = len(t.codes[a])
        else:
            base = 0
        new = self.new_codes.setdefault(a, {}) if register else self.new_codes.get(a, {})
        c = new.get(s)
        if c is None:
            if not register:
                return UNKNOWN_CODE
            c = new[s] = base + len(new)
        return float(c)


@dataclass
class ExpressionBatch:
    """Expressions as columns. Predicate ``p`` of expression ``i`` is row ``p`` in
    ``pred_off[i]:pred_off[i+1]`` (in the order given): attribute ``attr``, operator ``op``
    (:data:`OP_CODES`), operands ``a`` / ``b`` (``between``: lo / hi; one value: ``a``),
    ``weight``, the index interval ``[lo, hi]`` and, for ``in`` / ``not in``, the sorted values
    ``set_vals[set_off[p]:set_off[p+1]]``."""

    ids: np.ndarray
    score: np.ndarray
    pred_off: np.ndarray
    attr: np.ndarray
    op: np.ndarray
    a: np.ndarray
    b: np.ndarray
    weight: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    set_off: np.ndarray
    set_vals: np.ndarray

    _PRED = ("attr", "op", "a", "b", "weight", "lo", "hi")

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows) -> "ExpressionBatch":
        """The expressions ``rows`` (indices or a mask), in that order."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, np.int64)
        off, p = runs(self.pred_off[rows], np.diff(self.pred_off)[rows])
        s_off, v = runs(self.set_off[p], self.set_off[p + 1] - self.set_off[p])
        return ExpressionBatch(self.ids[rows], self.score[rows], off, *(getattr(self, c)[p] for c in self._PRED),
                               s_off, self.set_vals[v])

    @staticmethod
    def concat(batches: list["ExpressionBatch"]) -> "ExpressionBatch":
        if len(batches) == 1:
            return batches[0]
        cols = {c: np.concatenate([getattr(b, c) for b in batches]) for c in ("ids", "score", "set_vals")
                + ExpressionBatch._PRED}

        return ExpressionBatch(pred_off=concat_offsets([b.pred_off for b in batches]),
                               set_off=concat_offsets([b.set_off for b in batches]), **cols)


@dataclass
class EventBatch:
    """Events as columns: event ``i`` has the values ``val[off[i]:off[i+1]]`` of attributes
    ``attr`` (sorted) with weights ``weight``."""

    ids: np.ndarray
    off: np.ndarray
    attr: np.ndarray
    val: np.ndarray
    weight: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows) -> "EventBatch":
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, np.int64)
        off, v = runs(self.off[rows], np.diff(self.off)[rows])
        return EventBatch(self.ids[rows], off, self.attr[v], self.val[v], self.weight[v])


def _int64(kind, pos, v, field="id") -> int:
    if isinstance(v, bool) or not isinstance(v, Integral) or not INT64_MIN <= int(v) <= INT64_MAX:
        raise item_error(kind, pos, plain(v) if isinstance(v, np.generic) else v, field,
                         f"must be an int64, got {plain(v)!r}")
    return int(v)


def _number(v) -> bool:
    return isinstance(v, (Real, np.floating, np.integer)) and not isinstance(v, (bool, np.bool_))


def _finite_nonneg(where, v) -> float:
    if not _number(v) or not math.isfinite(float(v)) or float(v) < 0:
        raise item_error(*where, f"must be a finite number >= 0, got {plain(v)!r}")
    return float(v)


def _table_rows(table, kind: str) -> list[dict]:
    """Rows of an expression or event table (docs/contract.md, "Tables") as
    mappings: a predicate's ``value`` and an event's ``values`` / ``weights`` are JSON text."""
    import json
    try:
        import pyarrow as pa
    except ImportError:          # pragma: no cover (a dependency)
        pa = None
    if pa is not None and isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if pa is not None and isinstance(table, pa.Table):
        cols = table.to_pydict()
    else:                        # pandas
        cols = {str(c): table[c].tolist() for c in table.columns}
    need = ("id", "predicates") if kind == "expression" else ("id", "values")
    for c in need:
        if c not in cols:
            raise InvalidInput(f"{kind} table: missing column {c!r} (columns: {', '.join(cols)})")
    n = len(cols["id"])
    rows = []
    for pos in range(n):
        row = {c: cols[c][pos] for c in cols}
        try:
            if kind == "expression":
                preds = row["predicates"]
                if preds is not None:
                    row["predicates"] = [dict(p, value=json.loads(p["value"]) if isinstance(p.get("value"), str)
                                              else p.get("value")) for p in preds]
            else:
                for c in ("values", "weights"):
                    if isinstance(row.get(c), str):
                        row[c] = json.loads(row[c])
        except (ValueError, TypeError, AttributeError) as e:
            field = "predicates" if kind == "expression" else "values"
            raise item_error(kind, pos, row.get("id"), field, f"not valid JSON in the table: {e}") from None
        rows.append(row)
    return rows


def _is_table(items) -> bool:
    mod = type(items).__module__
    return mod.startswith("pyarrow") or mod.startswith("pandas")


def _items(items, kind: str, cls, lim: Limits) -> list:
    if _is_table(items):
        if len(items) > lim.max_items:
            raise too_many(kind, len(items), lim.max_items)
        return _table_rows(items, kind)
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (Sequence, np.ndarray)) and not hasattr(items, "__iter__"):
        raise InvalidInput(f"{kind}s: expected a sequence of {cls.__name__}, got {type(items).__name__}")
    out = []
    for it in items:
        if len(out) >= lim.max_items:
            raise too_many(kind, None, lim.max_items)
        out.append(it)
    return out


def _field(it, name, default=None):
    if isinstance(it, Mapping):
        return it.get(name, default)
    return getattr(it, name, default)


def _item_id(kind: str, cls, pos: int, it, seen: set[int]) -> int:
    """The id of item ``pos`` of a call (an instance of ``cls`` or a mapping), checked to be
    an int64 not met before in the call; ``seen`` gets it."""
    if not isinstance(it, (cls, Mapping)):
        raise InvalidInput(f"{kind} #{pos}: expected rankcast.{cls.__name__}, got {type(it).__name__}")
    i = _int64(kind, pos, _field(it, "id"))
    if i in seen:
        raise item_error(kind, pos, i, "id", "duplicate id within the call")
    seen.add(i)
    return i


def _predicate_interval(op: int, a: float, b: float, vals: list[float]) -> tuple[float, float]:
    """The index interval of a predicate (BE*-tree paper, Table I; over-approximated for
    ``!=``, ``not in`` and the gaps of ``in``, which the exact check removes)."""
    inf = math.inf
    if op == LT:
        return -inf, math.nextafter(a, -inf)
    if op == LE:
        return -inf, a
    if op == EQ:
        return a, a
    if op == GE:
        return a, inf
    if op == GT:
        return math.nextafter(a, inf), inf
    if op == BETWEEN:
        return a, b
    if op == IN:
        return min(vals), max(vals)
    return -inf, inf            # NE, NIN


def encode_expressions(items, table: AttributeTable, lim: Limits | None = None):
    """Validate ``items`` (``rc.Expression`` or mappings with ``id``, ``predicates``,
    ``score``) and encode them: returns (ExpressionBatch, pending additions to ``table``)."""
    lim = lim or limits()
    items = _items(items, "expression", Expression, lim)
    pend = _Pending(table)
    ids, score, pred_off = [], [], [0]
    attr, op, a_col, b_col, weight, lo, hi, set_off, set_vals = [], [], [], [], [], [], [], [0], []
    seen_ids: set[int] = set()
    for pos, it in enumerate(items):
        eid = _item_id("expression", Expression, pos, it, seen_ids)
        sc = _field(it, "score", 1.0)
        sc = _finite_nonneg(("expression", pos, eid, "score"), 1.0 if sc is None else sc)
        preds = _field(it, "predicates")
        if isinstance(preds, (str, bytes, Mapping)) or not isinstance(preds, (Sequence, np.ndarray)):
            raise item_error("expression", pos, eid, "predicates",
                             f"must be a sequence of rankcast.Predicate, got {type(preds).__name__}")
        if len(preds) == 0:
            raise item_error("expression", pos, eid, "predicates", "an expression needs at least one predicate")
        if len(preds) > lim.max_predicates:
            raise item_error("expression", pos, eid, "predicates",
                             over_limit("predicates", len(preds), "max_predicates", lim.max_predicates))
        named: set[str] = set()
        for j, p in enumerate(preds):
            f = f"predicates[{j}]"
            where = ("expression", pos, eid)
            if not isinstance(p, (Predicate, Mapping)):
                raise item_error(*where, f, f"expected rankcast.Predicate, got {type(p).__name__}")
            name, o, v, w = _field(p, "attr"), _field(p, "op"), _field(p, "value"), _field(p, "weight", 1.0)
            if not isinstance(name, str) or not name:
                raise item_error(*where, f + ".attr", f"must be a non-empty string, got {name!r}")
            if len(name) > lim.max_text_chars:
                raise item_error(*where, f + ".attr", over_limit("characters", len(name), "max_text_chars",
                                                                 lim.max_text_chars))
            if name in named:
                raise item_error(*where, f + ".attr", f"a second predicate on attribute {name!r}")
            named.add(name)
            if o not in OP_CODES:
                raise item_error(*where, f + ".op", f"unknown operator {o!r}; use one of {', '.join(OPERATORS)}")
            oc = OP_CODES[o]
            wv = _finite_nonneg((*where, f + ".weight"), 1.0 if w is None else w)
            vals: list[float] = []
            av = bv = 0.0
            fv = f + ".value"
            if oc == BETWEEN:
                if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, (Sequence, np.ndarray)) or len(v) != 2:
                    raise item_error(*where, fv, f"'between' needs a pair (lo, hi), got {v!r}")
                for x in v:
                    if not _number(x) or not math.isfinite(float(x)):
                        raise item_error(*where, fv, f"'between' needs finite numbers, got {plain(x)!r}")
                av, bv = float(v[0]), float(v[1])
                if av > bv:
                    raise item_error(*where, fv, f"'between' needs lo <= hi, got ({av!r}, {bv!r})")
                ai = pend.attr(name, NUM, (*where, f + ".attr"))
            elif oc in (IN, NIN):
                if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__iter__"):
                    raise item_error(*where, fv, f"{o!r} needs a non-empty sequence of values, got {v!r}")
                v = list(v)
                if not v:
                    raise item_error(*where, fv, f"{o!r} needs a non-empty sequence of values")
                if len(v) > lim.max_set_values:
                    raise item_error(*where, fv, over_limit("values", len(v), "max_set_values", lim.max_set_values))
                if all(isinstance(x, str) for x in v):
                    ai = pend.attr(name, STR, (*where, f + ".attr"))
                    vals = [pend.code(ai, x, True) for x in v]
                else:
                    for x in v:
                        if not _number(x) or not math.isfinite(float(x)):
                            raise item_error(*where, fv, f"{o!r} needs finite numbers or strings (not both), "
                                                         f"got {plain(x)!r}")
                    ai = pend.attr(name, NUM, (*where, f + ".attr"))
                    vals = [float(x) for x in v]
                vals = sorted(set(vals))
            else:
                if isinstance(v, str):
                    if oc not in (EQ, NE):
                        raise item_error(*where, fv, f"operator {o!r} orders numbers; a string attribute takes "
                                                     f"==, !=, in, not in (got {v!r})")
                    ai = pend.attr(name, STR, (*where, f + ".attr"))
                    av = pend.code(ai, v, True)
                elif _number(v) and math.isfinite(float(v)):
                    ai = pend.attr(name, NUM, (*where, f + ".attr"))
                    av = float(v)
                else:
                    raise item_error(*where, fv, f"operator {o!r} needs a finite number"
                                                 f"{' or a string' if oc in (EQ, NE) else ''}, got {plain(v)!r}")
                bv = av
            l, h = _predicate_interval(oc, av, bv, vals)
            attr.append(ai), op.append(oc), a_col.append(av), b_col.append(bv), weight.append(wv)
            lo.append(l), hi.append(h)
            set_vals.extend(vals)
            set_off.append(len(set_vals))
        ids.append(eid)
        score.append(sc)
        pred_off.append(len(attr))
    batch = ExpressionBatch(
        ids=np.array(ids, np.int64), score=np.array(score, np.float64), pred_off=np.array(pred_off, np.int64),
        attr=np.array(attr, np.int32), op=np.array(op, np.int8), a=np.array(a_col, np.float64),
        b=np.array(b_col, np.float64), weight=np.array(weight, np.float64), lo=np.array(lo, np.float64),
        hi=np.array(hi, np.float64), set_off=np.array(set_off, np.int64), set_vals=np.array(set_vals, np.float64))
    return batch, pend


def _json_objects(col, lim: Limits):
    """A table column of JSON objects, one per row (``values`` or ``weights`` of an event
    table), parsed by Arrow's JSON reader into one column per key: {key: (type, values,
    present)}; None where the column is not plainly such objects (a null, an empty text, a
    key given twice, a value that is no finite number or string, a text too long, a row
    with too many keys...), which the row by row reading then reports."""
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) or col.null_count:
        return None
    n = len(col)
    if pc.any(pc.match_substring(col, "null")).as_py() \
            or pc.any(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0)).as_py():
        return None         # a JSON null, which the reader takes for a missing key; an empty text
    data = "\n".join(col.to_pylist()).encode()
    try:
        parsed = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False,
                                                                             block_size=max(len(data) + 1, 1 << 20)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None         # not JSON objects, a key twice, a type changing between rows...
    if parsed.num_rows != n:        # every text holds one object (none is empty): one row each
        return None
    out = {}
    count = np.zeros(n, np.int64)
    for name, c in zip(parsed.column_names, parsed.columns):
        if not name:
            return None
        present = ~c.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_integer(c.type) or pa.types.is_floating(c.type):
            v = c.to_numpy(zero_copy_only=False).astype(np.float64)
            if not np.isfinite(v[present]).all():
                return None
            out[name] = (NUM, v, present)
        elif pa.types.is_string(c.type):
            longest = pc.max(pc.utf8_length(c)).as_py()
            if longest is not None and longest > lim.max_text_chars:
                return None
            out[name] = (STR, c.combine_chunks(), present)
        else:
            return None     # booleans, lists, objects: the row reading names the item
        count += present
    if n and count.max(initial=0) > lim.max_predicates:
        return None
    return out


def _encode_event_table(tab, table: AttributeTable, lim: Limits):
    """:func:`encode_events` of an Arrow event table, column by column (Arrow parses the
    JSON texts): the same batch and pending additions as the row by row reading, or None
    where that reading must decide (any doubt about the input: it then names the item)."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(tab, pa.RecordBatch):
        tab = pa.Table.from_batches([tab])
    n = tab.num_rows
    names = tab.column_names
    if not n or "id" not in names or "values" not in names or n > lim.max_items:
        return None
    idc = tab.column("id")
    if idc.type not in (pa.int64(), pa.int32(), pa.int16(), pa.int8()) or idc.null_count:
        return None
    ids = idc.to_numpy().astype(np.int64)
    if len(np.unique(ids)) != n:
        return None
    vals = _json_objects(tab.column("values").combine_chunks(), lim)
    if vals is None:
        return None
    wts: dict = {}
    wrows = np.zeros(n, bool)
    if "weights" in names:
        wc = tab.column("weights").combine_chunks()
        wrows = ~wc.is_null().to_numpy(zero_copy_only=False)
        if wrows.any():
            got = _json_objects(wc.filter(pa.array(wrows)), lim)
            if got is None:
                return None
            at = np.flatnonzero(wrows)
            for name, (kind, v, present) in got.items():
                if kind != NUM or name not in vals:
                    return None
                full = np.zeros(n, bool)
                full[at[present]] = True
                if (full & ~vals[name][2]).any() or (v[present] < 0).any():
                    return None     # a weight without a value, a negative weight
                w = np.ones(n)
                w[at[present]] = v[present]
                wts[name] = w
    pend = _Pending(table)
    # new attributes in the order the row by row reading meets them: by the first row that
    # names one, then by its place among that row's keys
    new = [name for name in vals if name not in table.ids]
    first = {name: int(np.argmax(vals[name][2])) for name in new}
    texts = tab.column("values")
    order = {}
    for r in sorted(set(first.values())):
        keys = list(json.loads(texts[r].as_py()))
        order.update((k, (r, keys.index(k))) for k in new if first[k] == r)
    aid = {}
    try:
        for name in sorted(vals, key=lambda x: order.get(x, (-1, 0))):
            kind, v, present = vals[name]
            r = first.get(name, int(np.argmax(present)))
            aid[name] = pend.attr(name, kind, ("event", r, int(ids[r]), f"values[{name!r}]"))
    except InvalidInput:
        return None         # a type clash: the row by row reading names the first item with it
    ev, attr, val, weight = [], [], [], []
    for name, (kind, v, present) in vals.items():
        rows = np.flatnonzero(present)
        a = aid[name]
        if kind == NUM:
            x = v[rows]
        else:
            strings = v.filter(pa.array(present))
            uniq = strings.unique()
            codes = np.array([pend.code(a, s, False) for s in uniq.to_pylist()], np.float64)
            x = codes[pc.index_in(strings, value_set=uniq).to_numpy()]
        ev.append(rows)
        attr.append(np.full(len(rows), a, np.int32))
        val.append(x)
        weight.append(wts[name][rows] if name in wts else np.ones(len(rows)))
    if ev:
        ev_a, attr_a, val_a, w_a = (np.concatenate(x) for x in (ev, attr, val, weight))
    else:
        ev_a, attr_a, val_a, w_a = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0), np.zeros(0)
    o = np.lexsort((attr_a, ev_a))
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(ev_a, minlength=n), out=off[1:])
    return EventBatch(ids=ids, off=off, attr=attr_a[o], val=val_a[o], weight=w_a[o]), pend


def encode_events(items, table: AttributeTable, lim: Limits | None = None):
    """Validate ``items`` (``rc.Event`` or mappings with ``id``, ``values``, ``weights``) and
    encode them: returns (EventBatch, pending additions to ``table``: new attributes' types).
    An Arrow event table is read column by column where it plainly holds valid events
    (:func:`_encode_event_table`), otherwise row by row, as objects are."""
    lim = lim or limits()
    if type(items).__module__.startswith("pyarrow"):
        got = _encode_event_table(items, table, lim)
        if got is not None:
            return got
    items = _items(items, "event", Event, lim)
    pend = _Pending(table)
    ids, off, attr, val, weight = [], [0], [], [], []
    seen: set[int] = set()
    for pos, it in enumerate(items):
        eid = _item_id("event", Event, pos, it, seen)
        values, weights = _field(it, "values"), _field(it, "weights")
        if not isinstance(values, Mapping):
            raise item_error("event", pos, eid, "values", f"must be a mapping of attribute to value, "
                                                          f"got {type(values).__name__}")
        if len(values) > lim.max_predicates:
            raise item_error("event", pos, eid, "values",
                             over_limit("values", len(values), "max_predicates", lim.max_predicates))
        if weights is not None and not isinstance(weights, Mapping):
            raise item_error("event", pos, eid, "weights", f"must be a mapping of attribute to weight or None, "
                                                           f"got {type(weights).__name__}")
        rows = []
        for name, v in values.items():
            f = f"values[{name!r}]"
            if not isinstance(name, str) or not name:
                raise item_error("event", pos, eid, "values", f"attribute names must be non-empty strings, got {name!r}")
            if isinstance(v, str):
                if len(v) > lim.max_text_chars:
                    raise item_error("event", pos, eid, f, over_limit("characters", len(v), "max_text_chars",
                                                                      lim.max_text_chars))
                ai = pend.attr(name, STR, ("event", pos, eid, f))
                x = pend.code(ai, v, False)
            elif _number(v) and math.isfinite(float(v)):
                ai = pend.attr(name, NUM, ("event", pos, eid, f))
                x = float(v)
            else:
                raise item_error("event", pos, eid, f, f"must be a finite number or a string, got {plain(v)!r}")
            w = 1.0
            if weights is not None and name in weights:
                w = _finite_nonneg(("event", pos, eid, f"weights[{name!r}]"), weights[name])
            rows.append((ai, x, w))
        if weights is not None:
            for name in weights:
                if name not in values:
                    raise item_error("event", pos, eid, f"weights[{name!r}]", "a weight for an attribute the "
                                                                              "event has no value of")
        rows.sort()
        for ai, x, w in rows:
            attr.append(ai), val.append(x), weight.append(w)
        ids.append(eid)
        off.append(len(attr))
    batch = EventBatch(ids=np.array(ids, np.int64), off=np.array(off, np.int64), attr=np.array(attr, np.int32),
                       val=np.array(val, np.float64), weight=np.array(weight, np.float64))
    return batch, pend


def check_expression_ids(ids, live) -> np.ndarray:
    """Validate an ``unsubscribe`` argument against the ``live`` ids (a container)."""
    from rankcast.errors import UnknownSubscription
    if isinstance(ids, (str, bytes, Mapping)) or not hasattr(ids, "__iter__"):
        raise InvalidInput(f"unsubscribe: expected expression ids, got {type(ids).__name__}")
    out, seen = [], set()
    lim = limits()
    for pos, v in enumerate(ids):
        if pos >= lim.max_items:
            raise too_many("id", None, lim.max_items)
        i = _int64("id", pos, v)
        if i in seen:
            raise item_error("id", pos, i, "id", "duplicate id within the call")
        seen.add(i)
        out.append(i)
    for i in out:
        if i not in live:
            raise UnknownSubscription(f"unknown expression id={i}")
    return np.array(out, np.int64)
