"""A follower rank of LLM(tensor_parallel_size=T, pipeline_parallel_size=P), started by rank 0.

    python3 -m pagoda._follower PARENT_PID ARGS_JSON

Loads its shard of the model (its stage's layers, its tensor rank's part of them) and runs
rank 0's steps until rank 0 shuts down (docs/parallel.md). Exits 1 with the reason on stderr
when a rank dies or the model does not split.
"""

import json
import os
import sys
import threading
import time

from . import _pagoda


def _exit_with_parent(parent: int) -> None:
    # Rank 0's process gone (before the group formed, nothing else would tell this rank). Not
    # PR_SET_PDEATHSIG: that fires when the thread that built the LLM ends, which may be early.
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def main() -> int:
    parent = int(sys.argv[1])
    args = json.loads(sys.argv[2])
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    level = os.environ.get("PAGODA_LOG_LEVEL") or os.environ.get("VLLM_LOGGING_LEVEL")
    _pagoda.log_to_stderr(level or "info")
    try:
        _pagoda.run_tensor_parallel_follower(args)
    except _pagoda.Error as e:
        print(f"pagoda: parallel rank {args['tensor_parallel_rank']}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
