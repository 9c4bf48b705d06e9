"""Why a DRA request gets no device: each cause from plain objects."""

from __future__ import annotations

from edgefd.kubectl_edgefd import claims
from edgefd.kubectl_edgefd.claims import Ask, Scene

from .objects import KNOWN, claim, coral, device, node, pod, slice_of, snapshot

TPU = "edgetpu.edgefd.io"


def scene(nodes, slices=(), claim_list=(), pods=(), selected=None, p=None) -> Scene:
    snap = snapshot(
        nodes=list(nodes), slices=list(slices), claims=list(claim_list), pods=list(pods)
    )
    names = selected if selected is not None else [n["metadata"]["name"] for n in nodes]
    return Scene.of(p or pod("waits"), snap, KNOWN, names)


def kinds_texts(causes) -> list[tuple[str, str]]:
    return [(c.kind, c.text) for c in causes]


def test_asks_of_a_spec_exactly_and_first_available() -> None:
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "a",
                    "exactly": {
                        "deviceClassName": TPU,
                        "count": 2,
                        "selectors": [{"cel": {"expression": "x"}}],
                    },
                },
                {"name": "b", "exactly": {"deviceClassName": TPU, "allocationMode": "All"}},
                {
                    "name": "c",
                    "firstAvailable": [
                        {"name": "tpu", "deviceClassName": TPU},
                        {"name": "ncs", "deviceClassName": "myriadx.edgefd.io"},
                    ],
                },
            ]
        }
    }
    a, b, c = claims.asks(spec, "claim ns/x")
    assert a == [Ask("request 'a' of claim ns/x", TPU, ("x",), 2)]
    assert b[0].count == 0
    assert [x.label for x in c] == [
        "alternative 'tpu' of request 'c' of claim ns/x",
        "alternative 'ncs' of request 'c' of claim ns/x",
    ]


def test_a_missing_class_with_the_name_meant() -> None:
    [(kind, text)] = kinds_texts(
        claims.explain_ask(Ask("r", "edgetpus.edgefd.io"), scene([node("pi")]))
    )
    assert kind == "claim-missing" and "(did you mean edgetpu.edgefd.io?)" in text


def test_another_drivers_class_is_not_ours_to_explain() -> None:
    s = scene([node("pi")])
    s.snap.classes.append({"metadata": {"name": "gpu.nvidia.com"}, "spec": {}})
    assert claims.explain_ask(Ask("r", "gpu.nvidia.com"), s) == []


def test_matches_nothing_with_what_the_devices_have() -> None:
    ask = Ask("request 'tpu' of claim ns/c", TPU, ('device.attributes["edgefd.io"].bus == "pci"',))
    s = scene([node("pi")], [slice_of("pi", [coral()])])
    [(kind, text)] = kinds_texts(claims.explain_ask(ask, s))
    assert kind == "selector-matches-nothing"
    assert text == (
        "The selectors of request 'tpu' of claim ns/c match no device: the 1 device of class "
        'edgetpu.edgefd.io (coral-usb-2-1 on pi) fail `device.attributes["edgefd.io"].bus == '
        '"pci"` (their bus: usb).'
    )


def test_allocated_tainted_and_free_but_closed() -> None:
    devs = [coral("coral-usb-1"), coral("coral-usb-2", taint="unplugged")]
    held = claim("other", "ns", allocated=[("pi", "coral-usb-1")], users=["p1"])
    s = scene([node("pi")], [slice_of("pi", devs)], [held])
    got = kinds_texts(claims.explain_ask(Ask("r", TPU), s))
    assert [k for k, _ in got] == ["tainted", "in-use"]
    assert got[0][1].startswith(
        "Devices r matches are tainted, and it does not tolerate the taint: coral-usb-2 on pi "
        "(edgefd.io/unhealthy=unplugged:NoSchedule) (devplugin taints"
    )
    assert got[1][1] == (
        "Every device r matches is allocated: coral-usb-1 on pi to pod ns/p1 (claim ns/other)."
    )
    tolerant = Ask("r", TPU, tolerations=({"key": "edgefd.io/unhealthy", "operator": "Exists"},))
    [(kind, _)] = kinds_texts(claims.explain_ask(tolerant, s))
    assert kind == "could-fit"
    closed = scene(
        [node("pi", taints=[{"key": "x", "effect": "NoSchedule"}])], [slice_of("pi", [coral()])]
    )
    [(kind, text)] = kinds_texts(claims.explain_ask(Ask("r", TPU), closed))
    assert kind == "node-blocked" and "does not tolerate the node's taint x:NoSchedule" in text


def test_all_mode_needs_every_matching_device_free() -> None:
    devs = [coral("coral-usb-1"), coral("coral-usb-2")]
    held = claim("other", "ns", allocated=[("pi", "coral-usb-1")])
    s = scene([node("pi")], [slice_of("pi", devs)], [held])
    causes = kinds_texts(claims.explain_ask(Ask("r", TPU, count=0), s))
    assert (
        "in-use",
        "Node pi has 1 free device that r matches; it needs every device it matches.",
    ) in causes


def test_no_slice_where_the_labels_say_there_is_one() -> None:
    labelled = node("pi", {"edgefd.io/edgetpu.count": "1"})
    s = scene(
        [labelled, node("pi2")], [slice_of("pi2", [device("ncs2-1", kind="myriadx", model="ncs2")])]
    )
    got = kinds_texts(claims.explain_ask(Ask("r", TPU), s))
    assert [k for k, _ in got] == ["plugin-not-registered", "no-device"]
    assert "no edgefd devplugin runs there" in got[0][1]


def test_first_available_any_alternative_will_do() -> None:
    s = scene([node("pi")], [slice_of("pi", [coral()])])
    alternatives = [Ask("a", "myriadx.edgefd.io"), Ask("b", TPU)]
    s.snap.classes.append(
        {
            "metadata": {"name": "myriadx.edgefd.io"},
            "spec": {
                "selectors": [
                    {"cel": {"expression": 'device.attributes["edgefd.io"].kind == "myriadx"'}}
                ]
            },
        }
    )
    assert [c.kind for c in claims.explain(alternatives, s)] == ["could-fit"]


def test_claim_of_a_template_entry() -> None:
    p = pod("waits", "ns")
    p["status"]["resourceClaimStatuses"] = [{"name": "tpu", "resourceClaimName": "waits-tpu-x"}]
    made = claim("waits-tpu-x", "ns")
    snap = snapshot(claims=[made])
    assert claims.claim_of(p, {"name": "tpu", "resourceClaimTemplateName": "t"}, snap) == (
        "waits-tpu-x",
        made,
    )
    assert claims.claim_of(p, {"name": "gpu", "resourceClaimTemplateName": "t"}, snap) == ("", None)
