"""Where a table comes from: file formats by suffix, Parquet files and folders (Spark's part
files), Spark DataFrames as Arrow, JSONL lines, and where a table's row lies in its file
(:func:`locate`). The lowest layer of the ingest package: every reader builds on it.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Sequence

import pyarrow as pa

from rankcast.common.validation import item_position, shift_position
from rankcast.errors import InvalidInput

__all__ = ["json_lines", "locate"]


def _parquet_files(path: Path) -> list[Path]:
    """The Parquet files of a file or folder, in the order their rows are read."""
    if path.is_file():
        return [path]
    # Spark writes part-00000..., in partition order; hidden and marker files are skipped.
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", "."))
                   and (p.suffix in (".parquet", ".pq") or "part-" in p.name))
    if not files:
        raise InvalidInput(f"no Parquet files under {path}")
    return files


def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suf in (".parquet", ".pq", ".csv", ".jsonl", ".ndjson", ".json"):
        if name.endswith(suf) or name.endswith(suf + ".gz"):
            return suf
    return ""


def _read_csv(path: Path, names: Sequence[str]) -> pa.Table:
    import pyarrow.csv as pcsv

    # Every known column as a string: the checks below parse numbers themselves so that a
    # bad value is reported with its row, and a text like "007" stays "007".
    conv = pcsv.ConvertOptions(column_types={n: pa.string() for n in names},
                               strings_can_be_null=True)
    try:
        return pcsv.read_csv(path, convert_options=conv)
    except pa.ArrowInvalid as e:
        raise InvalidInput(f"{path}: not a readable CSV table: {e}") from None


def json_lines(path: Path, kind: str) -> list[dict]:
    """The JSON objects of a JSONL file (gzip too); a line that is not one is named by its
    number and the item it would have been."""
    rows: list[dict] = []
    opener = open
    if str(path).endswith(".gz"):
        import gzip
        opener = gzip.open
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInput(f"{path}: {kind} #{len(rows)} (line {line_no}): not valid JSON: {e}") from None
            if not isinstance(row, dict):
                raise InvalidInput(f"{path}: {kind} #{len(rows)} (line {line_no}): expected a JSON object")
            rows.append(row)
    return rows


def _spark_to_arrow(df) -> pa.Table:
    """A Spark DataFrame as Arrow, in order (collects through Arrow, no row objects)."""
    try:
        batches = df._collect_as_arrow()  # what toPandas uses; public toArrow is Spark 4
        if batches:
            return pa.Table.from_batches(batches)
        from pyspark.sql.pandas.types import to_arrow_schema
        return to_arrow_schema(df.schema).empty_table()
    except (AttributeError, TypeError):
        return pa.Table.from_pandas(df.toPandas(), preserve_index=False)


def _spark_read(spark, path: str):
    suf = _suffix(Path(path))
    if suf == ".csv":
        return spark.read.option("header", True).csv(path)
    if suf in (".jsonl", ".ndjson", ".json"):
        return spark.read.json(path)
    return spark.read.parquet(path)


def locate(source, exc: InvalidInput, offset: int | None = 0) -> InvalidInput:
    """``exc`` prefixed with where its item is when ``source`` is a file path.

    An error naming an item (``subscription #3 (id=1004): ...``) at position ``offset + 3``
    of the file's table gets ``path, line L`` (CSV and JSONL: the 1-based line in the file,
    the CSV header counted) or ``file, row R`` (Parquet: the 1-based row of the file, or of
    the part file of a folder that holds it). ``offset`` None: the position is not known, and
    the path alone is added, as to any other error that does not already name it. Other
    sources leave ``exc`` unchanged."""
    if not isinstance(source, (str, os.PathLike)):
        return exc
    s = str(source)
    msg = str(exc)
    pos = item_position(msg)
    if pos is None or offset is None:
        return exc if s in msg else InvalidInput(f"{s}: {msg}")
    where = None
    if "://" not in s or s.startswith("file://"):
        try:
            where = _row_location(Path(s.removeprefix("file://")), offset + pos)
        except (OSError, ValueError, csv.Error, pa.ArrowException):
            where = None
    return InvalidInput(f"{where or s}: {shift_position(exc, offset)}")


def _open_text(path: Path):
    if str(path).endswith(".gz"):
        import gzip
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _row_location(path: Path, row: int) -> str | None:
    """``path, line L`` or ``file, row R`` of table row ``row`` (0-based) of the file or
    folder ``path``, as its reader numbers rows; None past the end. Reads the file up to that
    row: only an error pays for it."""
    suf = _suffix(path)
    if path.is_dir() or suf in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        for f in _parquet_files(path):
            n = pq.ParquetFile(f).metadata.num_rows
            if row < n:
                return f"{f}, row {row + 1}"
            row -= n
        return None
    seen = -1 if suf == ".csv" else 0      # the CSV header is a record before row 0
    with _open_text(path) as f:
        if suf == ".csv":
            reader = csv.reader(f)
            for record in reader:          # empty lines are no rows (pyarrow skips them too)
                if record:
                    if seen == row:
                        return f"{path}, line {reader.line_num}"
                    seen += 1
            return None
        for line_no, line in enumerate(f, 1):
            if line.strip():               # blank lines are no rows (both JSON readers skip them)
                if seen == row:
                    return f"{path}, line {line_no}"
                seen += 1
    return None
