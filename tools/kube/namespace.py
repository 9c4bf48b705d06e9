"""The namespace a command means when none is given: kubectl's rule, so that `kubectl edgefd
why POD` looks where `kubectl get pod POD` does.

The kubeconfig's context (`--context`, else its current-context; with several files, the first
file that sets it wins, as kubectl merges them) names a namespace, else `default`; in a pod,
the pod's own namespace (its service-account files). Read from the parsed files, without the
`kubernetes` package.
"""

from __future__ import annotations

from pathlib import Path

from .client import _kubeconfig_dict, find_kubeconfig
from .incluster import SERVICE_ACCOUNT_DIR

DEFAULT = "default"


def default_namespace(
    kubeconfig: str | None, context: str | None, account_dir: str = SERVICE_ACCOUNT_DIR
) -> str:
    found = find_kubeconfig(kubeconfig)
    if found is None:
        try:
            return Path(account_dir, "namespace").read_text().strip() or DEFAULT
        except OSError:
            return DEFAULT
    paths, label = found
    docs = [_kubeconfig_dict(p, label) for p in paths]
    current = context or next(
        (str(d["current-context"]) for d in docs if d.get("current-context")), None
    )
    for doc in docs:
        for c in doc.get("contexts") or ():
            if isinstance(c, dict) and c.get("name") == current:
                return str((c.get("context") or {}).get("namespace") or DEFAULT)
    return DEFAULT
