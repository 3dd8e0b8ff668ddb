"""A worker in a process of its own, for the signal tests (test_worker.py).

    python3 worker_process.py ADDR QUEUE MODE SHUTDOWN_TIMEOUT_S RELEASE_FILE

The handler prints "started ID" on stdout, then, by MODE: "finish" waits for RELEASE_FILE to
exist and returns; "hang" never returns. The worker logs to stderr. The exit status is what
the test checks: 0 after a SIGTERM in both modes.
"""

import logging
import os
import sys
import threading
import time

from sundial import Worker


def main():
    addr, queue, mode, shutdown_timeout_s, release_file = sys.argv[1:6]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")

    def handler(message):
        print(f"started {message.id}", flush=True)
        if mode == "hang":
            threading.Event().wait()
        deadline = time.monotonic() + 60
        while not os.path.exists(release_file):  # the test creates it; bounded
            if time.monotonic() > deadline:
                raise RuntimeError("never released")
            time.sleep(0.01)

    Worker(addr, queue, handler, concurrency=1,
           shutdown_timeout_s=float(shutdown_timeout_s)).run()
    print("run returned", flush=True)


if __name__ == "__main__":
    main()
