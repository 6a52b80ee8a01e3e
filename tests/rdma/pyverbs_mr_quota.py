#!/usr/bin/python3
"""pyverbs_mr_quota: a vNIC's MR quota as a program sees it, held across whatever happens to
jakirod between two halves of the program (a take-over, say), through rdma-core's own bindings.

    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_mr_quota.py SIZE

One process, one vNIC. ibv_reg_mr of SIZE bytes, again and again, until jakirod refuses one:
the refusal must be EDQUOT (the vNIC's rdma.max_mrs or max_mr_bytes), and it prints
"at quota: N MRs of SIZE bytes, then EDQUOT" and "holding". It then waits for a line on its
standard input, and checks, in the same context with the same MRs:
- one more ibv_reg_mr is refused with EDQUOT, as before;
- an ibv_dereg_mr gives the quota back: the next ibv_reg_mr succeeds;
- and the one after it is EDQUOT again;
- every MR registered before the wait still holds its bytes (each was filled with its own
  pattern, and is read back).
Each verified step prints "pyverbs_mr_quota: ok: ...".

Exit status: 0 when everything was verified, 1 otherwise.
"""

import errno
import sys

import pyverbs.enums as e
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError

from pyverbs_common import Failed, checker

check = checker("pyverbs_mr_quota")
ACCESS = e.IBV_ACCESS_LOCAL_WRITE
MOST = 8192  # a vNIC's largest max_mrs is 4096: no quota at all is a failure, not a hang


def register(pd, size):
    """An MR, or the errno of its refusal."""
    try:
        return MR(pd, size, ACCESS)
    except PyverbsRDMAError as err:
        return err.error_code


def fill(mr, n, size):
    mr.write(bytes([(n * 37 + i) & 0xFF for i in range(256)]) * (size // 256), size)


def holds(mr, n, size):
    return mr.read(size, 0) == bytes([(n * 37 + i) & 0xFF for i in range(256)]) * (size // 256)


def main():
    size = int(sys.argv[1])
    if size % 256:
        raise Failed("SIZE must be a multiple of 256")
    devices = get_device_list()
    check(len(devices) == 1, "one device: the vNIC's")
    ctx = Context(name=devices[0].name.decode())
    pd = PD(ctx)
    mrs = []
    while len(mrs) < MOST:
        mr = register(pd, size)
        if isinstance(mr, int):
            refused = mr
            break
        fill(mr, len(mrs), size)
        mrs.append(mr)
    else:
        raise Failed(f"{MOST} MRs registered and none refused: no quota")
    check(refused == errno.EDQUOT and mrs,
          f"at quota: {len(mrs)} MRs of {size} bytes, then EDQUOT ({refused})")
    print("holding", flush=True)
    sys.stdin.readline()

    again = register(pd, size)
    check(again == errno.EDQUOT, f"one more ibv_reg_mr is still EDQUOT ({again})")
    check(all(holds(mr, n, size) for n, mr in enumerate(mrs)),
          f"the {len(mrs)} MRs still hold their bytes")
    mrs.pop().close()
    back = register(pd, size)
    check(not isinstance(back, int), f"ibv_dereg_mr gave the quota back ({back})")
    mrs.append(back)
    over = register(pd, size)
    check(over == errno.EDQUOT, f"and the next ibv_reg_mr is EDQUOT again ({over})")
    for mr in mrs:
        mr.close()
    print("pyverbs_mr_quota: all verified", flush=True)


if __name__ == "__main__":
    try:
        main()
    except (Failed, PyverbsRDMAError) as err:
        print(f"pyverbs_mr_quota: FAILED: {err}", flush=True)
        sys.exit(1)
    sys.exit(0)
