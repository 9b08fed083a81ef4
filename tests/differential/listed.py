"""The differences ``docs/compatibility.md`` lists as known and harmless.

The document holds one markdown table between ``<!-- differences:begin -->`` and
``<!-- differences:end -->``: columns id, kind, reason. An id is
``<recording file>:<path>`` (``*:<path>`` for every recording), the path and kind as
``tests.differential.compare.Difference`` reports them; kind ``measured`` marks a value
measured on the machine (disk space, latency), which the suite masks instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.differential.compare import Difference

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
_BLOCK = re.compile(r"<!-- differences:begin -->(.*?)<!-- differences:end -->", re.S)
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([a-z]+)\s*\|\s*(.+?)\s*\|\s*$")


@dataclass(frozen=True)
class Listed:
    file: str  # "<name>.json" or "*"
    path: str
    kind: str
    reason: str

    @property
    def measured(self) -> bool:
        """A value measured on the machine: masked, and not required to differ."""
        return self.kind == "measured"

    @property
    def id(self) -> str:
        return f"{self.file}:{self.path} [{self.kind}]"

    def covers(self, file: str, d: Difference) -> bool:
        return self.file in (file, "*") and self.path == d.path and self.kind == d.kind


def listed_differences(doc: Path = DOC) -> list[Listed]:
    match = _BLOCK.search(doc.read_text())
    assert match, f"{doc} has no differences table between the markers"
    rows = []
    for line in match.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|") or line.startswith("| id") or set(line) <= set("|- "):
            continue
        m = _ROW.match(line)
        assert m, f"{doc}: cannot read the table row {line!r}"
        ident, kind, reason = m.groups()
        file, sep, path = ident.partition(":")
        assert sep and path, f"{doc}: id {ident!r} is not <file>:<path>"
        assert reason.strip(), f"{doc}: {ident} gives no reason"
        rows.append(Listed(file, path, kind, reason))
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), f"{doc}: duplicate rows {sorted({i for i in ids if ids.count(i) > 1})}"
    return rows
