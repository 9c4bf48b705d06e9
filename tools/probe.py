"""`python -m edgefd.probe PORT`: a startup probe that waits for its container to be ready
instead of failing while it starts.

The kubelet posts a Warning Event (`Unhealthy`) for every failed probe, whatever the
probe's failureThreshold (kubernetes v1.37.2, pkg/kubelet/prober/prober.go: every Failure,
error and warning result is recorded; worker.go only counts them towards the threshold). An
HTTP probe that reaches a container before Python has bound its port ("connection refused"),
or before the first sync ("503"), is such a failure, so every healthy rollout paged whoever
alerts on Warning Events. Run as an exec startupProbe, this waits inside the container (a
refused connection or a 503 is retried, not reported) and exits 0 as soon as /readyz answers
200; the kubelet then triggers the readiness probe at once, which passes. So a healthy start
records no failed probe, and a start that really fails still does, with its reason.

`--or-alive PATH`: for a container whose readiness depends on a peer (the API server, the
kubelet), a start is also complete when the wait is over and PATH (its /healthz) answers 200:
the startup probe must not restart it for a peer's outage; the readiness probe then says, in
its own Events, why it is not ready.

Standard library only: it runs once per container start, and starts in tens of milliseconds.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import time

POLL = 0.1  # seconds between attempts; a probe's own port answers in microseconds


def get(port: int, path: str, timeout: float) -> tuple[int, str]:
    """One GET of 127.0.0.1:port/path: (status, first line of the body); status 0 when there
    is no answer (refused while the process starts, or a timeout)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(512).decode("utf-8", "replace").strip().splitlines()
        return resp.status, body[0] if body else ""
    except (OSError, http.client.HTTPException) as e:
        return 0, f"no answer ({e.strerror if isinstance(e, OSError) and e.strerror else e})"
    finally:
        conn.close()


def wait(port: int, path: str, within: float, or_alive: str | None = None) -> tuple[bool, str]:
    """Poll until `path` answers 200 or `within` seconds pass; then, with `or_alive`, one
    look at that path. Returns (started, what was last seen)."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        status, detail = get(port, path, max(0.1, min(2.0, left)))
        if status == 200:
            return True, f"{path}: {detail}"
        seen = f"127.0.0.1:{port}{path}: " + (f"{status} {detail}" if status else detail)
        if left <= POLL:
            break
        time.sleep(POLL)
    if or_alive is not None:
        alive, how = get(port, or_alive, 2.0)
        if alive == 200:
            return True, f"started, not ready yet ({seen}); {or_alive}: {how}"
    return False, f"{seen} after {within:g}s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edgefd.probe",
        description="Wait until this container's own endpoint answers 200 (an exec "
        "startupProbe that fails only when the start really fails).",
    )
    parser.add_argument("port", type=int, help="the container's --listen port (on 127.0.0.1)")
    parser.add_argument("--path", default="/readyz", help="default: %(default)s")
    parser.add_argument(
        "--within",
        type=float,
        default=25.0,
        help="seconds to wait; keep it below the probe's timeoutSeconds (default: %(default)s)",
    )
    parser.add_argument(
        "--or-alive",
        metavar="PATH",
        help="when the wait is over, also count the start as complete if PATH answers 200",
    )
    args = parser.parse_args(argv)
    started, detail = wait(args.port, args.path, args.within, args.or_alive)
    print(detail)  # the kubelet puts it in the Event when the probe fails
    return 0 if started else 1


if __name__ == "__main__":
    sys.exit(main())
