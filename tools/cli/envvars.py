"""Every flag of every tool as an environment variable, `EDGEFD_<FLAG>`.

Why: a manifest that sets a flag by its variable is patched by container name (a strategic
merge of `env`), where a flag in argv can only be patched by its index in a list, which breaks
as soon as another component adds a container or a flag. Kept to click: importing this is
part of every tool's start-up floor.
"""

from __future__ import annotations

import click

ENV_PREFIX = "EDGEFD_"


def env_name(flag: str) -> str:
    """`--evict-after` → `EDGEFD_EVICT_AFTER`: the variable that sets a flag. Named for the
    flag people type, not click's parameter name (`--api` is `EDGEFD_API`, not `API_MODE`)."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def give_env(params: list[click.Parameter]) -> None:
    """Every option can also come from the environment, so a manifest sets a flag by container
    name (a strategic-merge patch of `env`) instead of patching argv by index. An option's own
    variable (`NODE_NAME`, `EDGEFD_DEVPLUGIN_CONFIG`) is kept after the flag's. The command
    line wins over the environment; `--help` shows each variable."""
    for p in params:
        if not isinstance(p, click.Option) or not p.expose_value or p.hidden:
            continue  # --help, --version and an old spelling: never from the environment
        longs = [o for o in p.opts if o.startswith("--")]
        if not longs:
            continue
        name = env_name(max(longs, key=len))
        own = [p.envvar] if isinstance(p.envvar, str) else list(p.envvar or ())
        p.envvar = [name, *(e for e in own if e != name)]
        p.show_envvar = True
