"""The append workload: an exactly-once append stream through EpochWriter.

The runner drops JSON files of numbered elements into an input directory; a Structured Streaming
job (its own process, killed by the nemesis and restarted on the same checkpoint) appends them to
the append-only table ``events`` through EpochWriter. Every element written must appear in
``events`` exactly once after healing.

    python -m snapview.chaos.workloads.append job ADDRESS INPUT_DIR CHECKPOINT MASTER STOP_FILE
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

from snapview.local_spark import local_session

if TYPE_CHECKING:
    from coordinator.client import Client

TABLE = "events"
JOB = "events"  # EpochWriter's default job name: the table's


def setup(client: Client) -> None:
    client.create_table(TABLE, "id BIGINT, v STRING", primary_key=[])


class Generator:
    """Writes files of ``per_file`` elements every ``every_s`` seconds (atomically: a file is
    renamed into the input dir once complete). ``written`` holds every element handed over."""

    def __init__(self, input_dir: str, per_file: int = 10, every_s: float = 0.2) -> None:
        self.input_dir, self.per_file, self.every_s = input_dir, per_file, every_s
        self.written: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        os.makedirs(input_dir, exist_ok=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        n = 0
        tmp = os.path.join(os.path.dirname(self.input_dir), "incoming.tmp")
        while not self._stop.wait(self.every_s):
            ids = list(range(n, n + self.per_file))
            with open(tmp, "w") as f:
                for i in ids:
                    f.write(json.dumps({"id": i, "v": f"e{i}"}) + "\n")
            os.rename(tmp, os.path.join(self.input_dir, f"part-{n:09d}.json"))
            self.written.update(ids)
            n += self.per_file


def counts(client: Client) -> Counter[int]:
    return Counter(client.read(TABLE).column("id").to_pylist())


def job(address: str, input_dir: str, checkpoint: str, master: str, stop_file: str) -> int:
    from snapview.chaos.stream_job import start_append_stream

    spark = local_session(master)
    q = start_append_stream(
        spark,
        address,
        TABLE,
        input_dir,
        checkpoint,
        files_per_batch=5,
        processingTime="200 milliseconds",
    )
    print("STARTED", flush=True)
    while not os.path.exists(stop_file):
        if not q.isActive:
            print(f"FAILED {q.exception()}", flush=True)
            return 1
        time.sleep(0.1)
    q.processAllAvailable()
    q.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    _, cmd, address, input_dir, checkpoint, master, stop_file = sys.argv
    assert cmd == "job"
    sys.exit(job(address, input_dir, checkpoint, master, stop_file))
