"""why.explain on plain objects: the paragraph's frame (not Pending, scheduled, never looked
at, gated), a pod that asks nothing of edgefd's, an allocated claim, a template's claim not
made yet, a pod that selects by label only."""

from __future__ import annotations

from edgefd.kubectl_edgefd.why import explain, templates_to_read

from .objects import KNOWN, claim, claiming, coral, node, pod, slice_of, snapshot

LABELS = {"edgefd.io/edgetpu.present": "true", "edgefd.io/edgetpu.count": "1"}


def told(p: dict, **snap: object) -> tuple[list[str], str]:
    e = explain(p, snapshot(**snap), KNOWN)
    return [c.kind for c in e.causes], e.paragraph()


def test_not_pending_says_so_with_the_reason() -> None:
    p = pod("p", node="pi", phase="Failed")
    p["status"].update(reason="UnexpectedAdmissionError", message="Allocate failed")
    kinds, text = told(p)
    assert kinds == ["not-pending"]
    assert text == (
        "Pod default/p is not Pending: it is Failed on node pi "
        "(UnexpectedAdmissionError: Allocate failed)."
    )


def test_scheduled_names_what_its_containers_wait_for() -> None:
    p = pod("p", node="pi")
    p["status"]["containerStatuses"] = [
        {"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}
    ]
    kinds, text = told(p)
    assert kinds == ["scheduled"] and text.endswith("(waiting: app: ContainerCreating).")


def test_nothing_of_edgefds_and_no_scheduler() -> None:
    kinds, text = told(pod("p", message=None), nodes=[node("pi")])
    assert kinds == ["no-scheduler", "nothing-asked"]
    assert "is default-scheduler running?" in text and text.startswith("Pod default/p is Pending.")
    gated = pod("p", message=None, schedulingGates=[{"name": "example.com/wait"}])
    assert told(gated, nodes=[node("pi")])[1].count("scheduling gates (example.com/wait)") == 1


def test_the_schedulers_words_end_the_paragraph() -> None:
    p = pod(
        "p",
        limits={"edgefd.io/coral-usb": "1"},
        message="0/1 nodes are available: 1 Insufficient edgefd.io/coral-usb.",
    )
    kinds, text = told(p, nodes=[node("pi", LABELS, {"edgefd.io/coral-usb": (1, 0)})])
    assert kinds == ["unhealthy"]
    assert text.endswith(
        'The scheduler says: "0/1 nodes are available: 1 Insufficient edgefd.io/coral-usb."'
    )


def test_an_allocated_claim_on_a_node_the_pod_may_not_use() -> None:
    c = claim("c", allocated=[("pi", "coral-usb-2-1")])
    p = claiming("c", tolerations=[])
    tainted = node("pi", taints=[{"key": "maintenance", "effect": "NoExecute"}])
    kinds, text = told(p, nodes=[tainted], slices=[slice_of("pi", [coral()])], claims=[c])
    assert kinds == ["node-blocked", "claim-pending"]
    assert (
        "Claim default/c is allocated already (coral-usb-2-1 (pi)): the pod may only go to pi."
        in text
    )
    assert (
        "Node pi holds its claim's devices, but the pod does not tolerate the node's taint "
        "maintenance:NoExecute." in text
    )


def test_a_templates_claim_not_made_yet_is_asked_of_the_template() -> None:
    p = pod("p")
    p["spec"]["resourceClaims"] = [{"name": "tpu", "resourceClaimTemplateName": "t"}]
    snap = snapshot(nodes=[node("pi")], slices=[slice_of("pi", [coral()])])
    assert templates_to_read(p, snap) == ["t"]
    spec = claim("x", selectors=['device.attributes["edgefd.io"].bus == "pci"'])["spec"]
    e = explain(p, snap, KNOWN, {"t": {"spec": {"spec": spec}}})
    assert [c.kind for c in e.causes] == ["selector-matches-nothing", "claim-pending"]
    assert "The selectors of request 'tpu' of template default/t match no device" in e.paragraph()
    missing = explain(p, snap, KNOWN, {"t": None})
    assert [c.kind for c in missing.causes] == ["claim-missing"]


def test_label_only_every_labelled_node_tainted() -> None:
    p = pod("p", nodeSelector={"edgefd.io/edgetpu.present": "true"})
    tainted = node("pi", LABELS, taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}])
    kinds, text = told(p, nodes=[tainted, node("x86")])
    assert kinds == ["node-blocked"]
    assert (
        "Every node with the labels it asks is closed to it by a taint it does not tolerate: "
        "pi (x=y:NoSchedule)." in text
    )
