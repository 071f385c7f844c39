"""Writing and reading results/*.csv, and the journal that makes a run resumable.

One row per measurement, the same columns in every file (experiments/schema.py, results/README.md); a failed measurement is a row
with its status and a note, never a missing point. While an ablation runs, finished rows go to a
journal (JSON lines under results/.partial/), so an interrupted run keeps them and a restart skips
them; the CSV is written once, when every cell has its row.
"""
import csv
import dataclasses
import json
import os

from experiments.schema import COLUMNS, FILE_COLUMNS, LATER_COLUMNS, Row


def columns_of(path: str) -> list[str]:
    """The columns of a results file: those of its name in FILE_COLUMNS (a side file), else the Row schema's."""
    return FILE_COLUMNS.get(os.path.splitext(os.path.basename(path))[0], COLUMNS)


def write_csv(rows: list[dict], path: str) -> None:
    """Write rows (dicts keyed by the file's columns) atomically: the file appears complete or not at all."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = path + ".tmp"
    with open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns_of(path), restval="", extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: "" if value is None else value for key, value in row.items()})
    os.replace(partial, path)


def read_csv(path: str) -> list[dict]:
    """Rows of a results CSV as dicts of strings; refuses a file whose columns are not its schema's."""
    columns = columns_of(path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        found = list(reader.fieldnames or ())
        absent = [column for column in columns if column not in found]
        if (columns is COLUMNS and absent and set(absent) <= set(LATER_COLUMNS)
                and found == [column for column in columns if column in found]):
            # written before some of LATER_COLUMNS: read them empty
            return [{column: row.get(column, "") for column in columns} for row in reader]
        if reader.fieldnames != columns:
            missing = sorted(set(columns) - set(reader.fieldnames or ()))
            extra = sorted(set(reader.fieldnames or ()) - set(columns))
            raise ValueError(f"{path}: columns differ from the results schema (missing {missing}, unexpected {extra})")
        return list(reader)


class Journal:
    """Append-only record of one ablation run: which cell started, and each finished cell's row.

    Lines are {"provenance": {...}}, {"start": key} or {"done": key, "row": {...}}; each is flushed
    and synced before the work it announces goes on, and a torn last line (a kill mid-write) is
    ignored when read back.
    """

    def __init__(self, path: str):
        self.path = path
        self.rows: dict[str, dict] = {}
        self.last_started: str | None = None
        self.provenance: dict = {}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    try:
                        self._apply(json.loads(line))
                    except json.JSONDecodeError:
                        break

    def _apply(self, entry: dict) -> None:
        if "provenance" in entry:
            self.provenance = entry["provenance"]
        elif "start" in entry:
            self.last_started = entry["start"]
        else:
            self.rows[entry["done"]] = entry["row"]

    def _append(self, entry: dict) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._apply(entry)

    def set_provenance(self, provenance: dict) -> None:
        self._append({"provenance": provenance})

    def start(self, key: str) -> None:
        self._append({"start": key})

    def done(self, key: str, row: Row) -> None:
        self._append({"done": key, "row": dataclasses.asdict(row)})

    def unfinished(self) -> str | None:
        """The cell that was started last and has no row: the one running when a process died."""
        return self.last_started if self.last_started not in self.rows else None
