"""Device nodes and rules in the one notation of the command line, the logs and the v1 files
(`c:189:5[:rwm]`): what parses and what is a usage error, and the merge of a grant into the
rules a program already carries (one rule per node, the newest wins; a node both allowed and
revoked refused)."""

from __future__ import annotations

import pytest

from edgefd.core.errors import UsageError
from edgefd.device_keeper.rules import DeviceNumber, Rule, merge, parse_node

C4, C5 = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5)


@pytest.mark.parametrize(
    "text, node, access",
    [
        ("c:189:5", C5, "rw"),
        ("c:189:5:rwm", C5, "rwm"),
        ("c:189:5:mr", C5, "rm"),
        ("b:8:0:r", DeviceNumber("b", 8, 0), "r"),
        (" c:189:4 ", C4, "rw"),
    ],
)
def test_parse_node(text, node, access):
    assert parse_node(text) == (node, access)


@pytest.mark.parametrize(
    "text",
    [
        "c:189", "x:1:2", "c:-1:2", "c:189:5:rx", "c:189:5:rr", "c:4096:0", "c:1:1048576", "",
        "c:\u0661\u0668\u0669:\u0665",  # issue 30 (9): Arabic-Indic digits were 189:5
        "c:189:\uff15",  # a fullwidth 5
        "c:189:5\n:r",
    ],
)  # fmt: skip
def test_bad_nodes_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_node(text)


def test_merge_newest_wins_and_keeps_one_rule_per_node():
    first = merge((), {C5: "rw"}, {C4})
    assert first == (Rule(C4, None), Rule(C5, "rw"))
    # the same device gets 189:4 back later: allowed again, 189:5 revoked
    assert merge(first, {C4: "rw"}, {C5}) == (Rule(C4, "rw"), Rule(C5, None))


def test_allow_and_revoke_of_one_node_is_refused():
    with pytest.raises(UsageError, match="both allowed and revoked"):
        merge((), {C4: "rw"}, {C4})
