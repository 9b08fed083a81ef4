"""How a row of the differences table matches a difference (pure logic, no cluster)."""

from __future__ import annotations

import pytest

from tests.differential.compare import Difference, diff
from tests.differential.listed import Listed, parse_rows, pattern


def _row(path: str, kind: str, detail: str, file: str = "a.json") -> Listed:
    return Listed(file, path, kind, detail, "because of a reason")


def _tree(body: dict) -> dict:
    return {"code": 0, "header_keys": ["code"], "extFields": None, "body": body}


def test_a_row_covers_only_its_own_file_kind_path_and_detail() -> None:
    row = _row("extFields.x", "value", "'1' != '2'")
    assert row.covers("a.json", Difference("extFields.x", "value", "'1' != '2'"))
    assert not row.covers("b.json", Difference("extFields.x", "value", "'1' != '2'"))
    assert not row.covers("a.json", Difference("extFields.x", "type", "'1' != '2'"))
    assert not row.covers("a.json", Difference("extFields.y", "value", "'1' != '2'"))
    assert not row.covers("a.json", Difference("extFields.x", "value", "'1' != '3'"))
    assert not row.covers("a.json", Difference("extFields.x", "value", "'1' != '2' "))
    assert _row("code", "code", "0 != 1", file="*").covers("b.json", Difference("code", "code", "0 != 1"))


def test_missing_and_extra_keys_are_reported_one_by_one() -> None:
    found = diff(_tree({"table": {"a": "1", "b": "2", "c": "3"}}), _tree({"table": {"a": "1", "d": "4"}}))
    assert found == [Difference("body.table.b", "missing", "'2' != absent"),
                     Difference("body.table.c", "missing", "'3' != absent"),
                     Difference("body.table.d", "extra", "absent != '4'")]


def test_a_row_for_one_key_does_not_cover_another() -> None:
    row = _row("body.table.scheduleMessageOffset_3", "missing", "'1,1' != absent")
    theirs = _tree({"table": {"scheduleMessageOffset_3": "1,1", "sendThreadPoolQueueCapacity": "10000"}})
    found = diff(theirs, _tree({"table": {}}))
    assert [d for d in found if not row.covers("a.json", d)] == \
        [Difference("body.table.sendThreadPoolQueueCapacity", "missing", "'10000' != absent")]


def test_a_pattern_row_covers_other_runs_topics_not_system_or_this_runs_topics() -> None:
    rows = [_row("body.topicConfigTable.rec_0?????r?_*", "missing", "{* != absent"),
            _row("body.topicConfigTable.%RETRY%rec_0?????r?_*", "missing", "{* != absent")]
    config = {"perm": 6}
    theirs = _tree({"topicConfigTable": {"rec_085551r0_main": config, "%RETRY%rec_085551r0_cg": config,
                                         "rec_<RUN>_main": config, "SELF_TEST_TOPIC": config,
                                         "%DLQ%rec_085551r0_rg": config}})
    found = diff(theirs, _tree({"topicConfigTable": {}}))
    assert [d.path for d in found if not any(r.covers("a.json", d) for r in rows)] == \
        ["body.topicConfigTable.%DLQ%rec_085551r0_rg", "body.topicConfigTable.SELF_TEST_TOPIC",
         "body.topicConfigTable.rec_<RUN>_main"]
    assert not rows[0].covers("a.json", Difference("body.topicConfigTable.rec_085551r0_main", "extra",
                                                   "absent != {}"))


def test_an_answer_where_apache_was_silent_names_its_code_and_remark() -> None:
    ours = {"code": 3, "remark": " request type 9999 not supported", "header_keys": ["code"], "extFields": None}
    row = _row("response", "answered", "absent != code 3 remark ' request type 9999 not supported'")
    (found,) = diff(None, ours)
    assert row.covers("a.json", found)
    (changed,) = diff(None, {**ours, "remark": "request code 9999 is not supported"})
    assert not row.covers("a.json", changed)


def test_wildcards_and_literals() -> None:
    assert pattern("1??? ms").fullmatch("1001 ms")
    assert not pattern("1??? ms").fullmatch("10001 ms")
    assert not pattern("1??? ms").fullmatch("999 ms")
    assert pattern("a.b[]").fullmatch("a.b[]") and not pattern("a.b[]").fullmatch("axb[]")
    assert pattern("absent != '*'").fullmatch("absent != '0.7'")


def test_measured_rows_cover_nothing() -> None:
    (row,) = parse_rows("| `a.json:body.x` | measured | — | measured on the machine |")
    assert row.measured and not row.covers("a.json", Difference("body.x", "measured", "—"))


@pytest.mark.parametrize("line", [
    "| `a.json:body.table.*` | missing | `* != absent` | a row that would cover every key |",
    "| `a.json:*` | value | `*` | a row that would cover every path |",
    "| `a.json:body.x` | value | — | a non-measured row without its difference |",
    "| `a.json:body.x` | measured | `1 != 2` | a measured row with a difference |",
    "| `a.json:body.x` | value | | no difference column at all |",
])
def test_rows_that_name_no_exact_difference_are_refused(line: str) -> None:
    with pytest.raises(AssertionError):
        parse_rows(line)


def test_duplicate_rows_are_refused() -> None:
    line = "| `a.json:body.x` | value | `1 != 2` | the same row twice here |"
    with pytest.raises(AssertionError, match="duplicate"):
        parse_rows(f"{line}\n{line}")


def test_header_keys_only_one_side_has_are_named() -> None:
    theirs = {"code": 1, "header_keys": ["code", "remark"], "extFields": None, "remark": "x"}
    ours = {"code": 1, "header_keys": ["code", "extFields"], "extFields": None}
    assert diff(theirs, ours) == [Difference("header_keys.extFields", "extra", "absent != present"),
                                  Difference("header_keys.remark", "missing", "present != absent")]


def test_a_masked_key_is_still_required_unless_its_parent_is_masked() -> None:
    theirs, ours = _tree({"table": {"runtime": "5 minutes", "x": "1"}}), _tree({"table": {"x": "1"}})
    assert diff(theirs, ours, {"body.table.runtime"}) == \
        [Difference("body.table.runtime", "missing", "'5 minutes' != absent")]
    assert diff(theirs, ours, {"body.table"}) == []
    assert diff(_tree({"table": {"runtime": "5 minutes"}}), _tree({"table": {"runtime": "1 minute"}}),
                {"body.table.runtime"}) == []


def test_a_row_naming_a_release_covers_only_that_release_s_recordings() -> None:
    rows = parse_rows("| `5.5.0/a.json:version` | value | `513 != 409` | the later release's own version |\n"
                      "| `5.5.0/*:extFields.x` | missing | `'0' != absent` | a field the later release adds |\n"
                      "| `a.json:version` | value | `513 != 409` | the same difference on the base release |")
    later, every, base = rows
    found = Difference("version", "value", "513 != 409")
    assert (later.release, later.file, later.id) == ("5.5.0", "a.json", "5.5.0/a.json:version [value] 513 != 409")
    assert later.covers("a.json", found, "5.5.0") and not later.covers("a.json", found)
    assert base.release == "4.9.8" and base.covers("a.json", found) and not base.covers("a.json", found, "5.5.0")
    extra = Difference("extFields.x", "missing", "'0' != absent")
    assert every.covers("b.json", extra, "5.5.0") and not every.covers("b.json", extra, "4.9.8")


def test_a_release_that_was_not_recorded_is_refused() -> None:
    with pytest.raises(AssertionError, match="names release '5.1.3'"):
        parse_rows("| `5.1.3/a.json:version` | value | `439 != 409` | a release without replayed recordings |")
