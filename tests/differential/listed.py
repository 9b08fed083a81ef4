"""The differences ``docs/compatibility.md`` lists as known and harmless.

The document holds one markdown table between ``<!-- differences:begin -->`` and
``<!-- differences:end -->``: columns id, kind, difference, reason. An id is
``<recording file>:<path>`` (``*:<path>`` for every recording) for the 4.9.8 recordings,
``<release>/<recording file>:<path>`` (``5.5.0/*:<path>``) for another release's
recordings of the same requests (``RELEASES``), the path, kind and detail
as ``tests.differential.compare.Difference`` reports them. A row covers a difference when
file, kind, path and detail all match; in the path and the detail ``*`` stands for any
run of characters and ``?`` for any one character, everything else is literal. Kind
``measured`` marks a value measured on the machine (disk space, latency), which the suite
masks instead; its difference column is ``—``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tests.differential.compare import Difference

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
NOT_COMPARED = "—"  # the difference column of a measured row
BASE = "4.9.8"      # the release the embedded cluster answers as; its rows name no release
RELEASES = (BASE, "5.5.0")
_BLOCK = re.compile(r"<!-- differences:begin -->(.*?)<!-- differences:end -->", re.S)
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([a-z]+)\s*\|\s*(`[^`]+`|—)\s*\|\s*(.+?)\s*\|\s*$")


def pattern(text: str) -> re.Pattern[str]:
    """``text`` with ``*`` = any run of characters, ``?`` = any one character, the rest literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text), re.S)


@dataclass(frozen=True)
class Listed:
    file: str  # "<name>.json" or "*"
    path: str
    kind: str
    detail: str
    reason: str
    release: str = BASE

    @property
    def recording(self) -> str:
        """The id's first part: the file, with its release unless it is the base one."""
        return self.file if self.release == BASE else f"{self.release}/{self.file}"

    @property
    def measured(self) -> bool:
        """A value measured on the machine: masked, and not required to differ."""
        return self.kind == "measured"

    @property
    def id(self) -> str:
        return f"{self.recording}:{self.path} [{self.kind}] {self.detail}"

    @cached_property
    def _patterns(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        return pattern(self.path), pattern(self.detail)

    def applies(self, file: str, release: str = BASE) -> bool:
        """A row of this recording (or of every recording) of this release."""
        return self.release == release and self.file in (file, "*")

    def covers(self, file: str, d: Difference, release: str = BASE) -> bool:
        path, detail = self._patterns
        return (not self.measured and self.applies(file, release) and self.kind == d.kind
                and path.fullmatch(d.path) is not None and detail.fullmatch(d.detail) is not None)


def listed_differences(doc: Path = DOC) -> list[Listed]:
    match = _BLOCK.search(doc.read_text())
    assert match, f"{doc} has no differences table between the markers"
    return parse_rows(match.group(1), str(doc))


def parse_rows(table: str, where: str = "the table") -> list[Listed]:
    rows = []
    for line in table.splitlines():
        line = line.strip()
        if not line.startswith("|") or line.startswith("| id") or set(line) <= set("|- "):
            continue
        m = _ROW.match(line)
        assert m, f"{where}: cannot read the table row {line!r}"
        ident, kind, detail, reason = m.groups()
        recording, sep, path = ident.partition(":")
        assert sep and path, f"{where}: id {ident!r} is not <file>:<path>"
        release, _, file = recording.rpartition("/")
        assert release in ("", *RELEASES[1:]), f"{where}: id {ident!r} names release {release!r}, " \
                                               f"not one of {RELEASES[1:]} (4.9.8 rows name none)"
        assert (kind == "measured") == (detail == NOT_COMPARED), \
            f"{where}: {ident} [{kind}]: a measured row has difference {NOT_COMPARED}, any other a `detail`"
        assert not re.search(r"(^|\.)[*?]", path), f"{where}: {ident} must name its key, not a wildcard"
        assert kind != "measured" or not re.search(r"[*?]", path), f"{where}: {ident}: a measured path is literal"
        rows.append(Listed(file, path, kind, detail.strip("`"), reason, release or BASE))
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), f"{where}: duplicate rows {sorted({i for i in ids if ids.count(i) > 1})}"
    return rows
