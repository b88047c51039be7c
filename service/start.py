"""The `transformer` command's entry point. `transformer translate` decodes in its own process, so before anything
imports torch it starts itself again, once, with the allocator of TRANSFORMER_ALLOCATOR preloaded (service.allocator,
as `transformer worker` does): here that costs a Python start-up, not torch's import (about 1.3 s)."""

from __future__ import annotations

import os
import sys
from typing import cast, get_args

from service.allocator import Allocator, AllocatorMissing, restart_with

DECODING_HERE = frozenset({"translate"})  # the subcommands that decode in this process
SETTING = "TRANSFORMER_ALLOCATOR"  # service.settings.ServiceSettings.allocator's variable


def main() -> int:
    if sys.argv[1:2] and sys.argv[1] in DECODING_HERE:
        setting = os.environ.get(SETTING, "auto")
        if setting not in get_args(Allocator):
            print(f"error: {SETTING}: one of {', '.join(get_args(Allocator))}, got {setting!r}", file=sys.stderr)
            return 2
        try:
            restart_with(cast(Allocator, setting))  # returns once it runs on it, or on the system's allocator
        except AllocatorMissing as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    from service.cli import main as run  # torch and the rest

    return run()


if __name__ == "__main__":  # `python -m service.start`: the command without its script, allocator included
    sys.exit(main())
