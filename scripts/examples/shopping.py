"""FLIP-276's shopping pipeline: two independent jobs and a consistent join of their views.

    .venv/bin/python scripts/examples/shopping.py

- ``user_item_amount``: SUM(amount) per (user, item), one job;
- ``user_item_price``: SUM(price) per (user, item), another job;
- ``user_item_avg``: the join of the two, avg_price = price / amount, a third job.

Every order's price is amount x the item's unit price, so avg_price must always equal the unit
price. The join reads both views at the same barrier, so it always does. Reading the two views at
their own newest versions (mode ``latest``, what ordinary streaming gives) mixes barriers: the
example counts how often that pairs an amount with a price of another moment.
"""

from __future__ import annotations

import random
import sys
import threading
import time

try:
    from scripts.examples.common import local_stack
except ImportError:  # run as a script
    from common import local_stack

USERS, ITEMS = 5, 4
VIEWS = {
    "user_item_amount": "SELECT user_id, item_id, SUM(amount) AS amount FROM orders "
    "GROUP BY user_id, item_id",
    "user_item_price": "SELECT user_id, item_id, SUM(price) AS price FROM orders "
    "GROUP BY user_id, item_id",
    "user_item_avg": "SELECT a.user_id, a.item_id, p.price / a.amount AS avg_price "
    "FROM user_item_amount a JOIN user_item_price p "
    "ON a.user_id = p.user_id AND a.item_id = p.item_id",
}


def unit_price(item: int) -> int:
    return 10 * item + 5


def _orders(c, stop: threading.Event) -> None:
    rng, n = random.Random(2), 0
    while not stop.is_set():
        with c.transaction() as t:
            for _ in range(5):
                item, amount = rng.randrange(ITEMS), rng.randint(1, 9)
                t.put(
                    "orders",
                    {
                        "id": n,
                        "user_id": rng.randrange(USERS),
                        "item_id": item,
                        "amount": amount,
                        "price": amount * unit_price(item),
                    },
                )
                n += 1
        time.sleep(0.02)


def run(spark, address: str, seconds: float = 10.0, out=print) -> dict:
    """Run the pipeline under a stream of orders; returns the read counts and violations."""
    import coordinator
    from spark_sink import MaterializedView

    c = coordinator.connect(address)
    c.create_table(
        "orders",
        "id BIGINT, user_id INT, item_id INT, amount BIGINT, price BIGINT",
        primary_key=["id"],
    )
    jobs = []
    stop = threading.Event()
    writer = threading.Thread(target=_orders, args=(c, stop), daemon=True)
    result: dict = {
        "consistent_reads": 0,
        "consistent_bad": 0,
        "latest_reads": 0,
        "latest_mixed": 0,
    }
    try:
        with c.transaction() as t:
            t.put("orders", {"id": -1, "user_id": 0, "item_id": 0, "amount": 1, "price": 5})
        for name, sql in VIEWS.items():
            view = (
                MaterializedView.builder(spark)
                .coordinator(address)
                .query(sql)
                .target(name)
                .primary_key("user_id", "item_id")
                .trigger_interval("200 milliseconds")
                .build()
            )
            result.setdefault("strategies", {})[name] = view.strategy_name
            jobs.append(view.start())
        ts = c.tso()
        for j in jobs:
            j.await_barrier(ts, timeout=120)
        writer.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            snap = c.snapshot(["user_item_avg"])
            rows = snap.read("user_item_avg").to_pylist()
            result["consistent_reads"] += 1
            if any(r["avg_price"] != unit_price(r["item_id"]) for r in rows):
                result["consistent_bad"] += 1
            latest = c.snapshot(["user_item_amount", "user_item_price"], mode="latest")
            amounts = {
                (r["user_id"], r["item_id"]): r["amount"]
                for r in latest.read("user_item_amount").to_pylist()
            }
            prices = latest.read("user_item_price").to_pylist()
            result["latest_reads"] += 1
            if any(
                (k := (r["user_id"], r["item_id"])) in amounts
                and r["price"] / amounts[k] != unit_price(r["item_id"])
                for r in prices
            ):
                result["latest_mixed"] += 1
            time.sleep(0.05)
        out(
            f"user_item_avg at barrier {snap.barrier}: "
            + ", ".join(f"u{r['user_id']}/i{r['item_id']}={r['avg_price']:g}" for r in rows[:6])
        )
        result["last_steps"] = {j.view.target: j.progress().last_strategy for j in jobs}
    finally:
        stop.set()
        writer.join(10)
        for j in jobs:
            j.stop()
        c.close()
    out(
        f"consistent join: {result['consistent_bad']} of {result['consistent_reads']} reads had an "
        f"avg_price off the unit price; two views read at their latest versions: "
        f"{result['latest_mixed']} of {result['latest_reads']} reads mixed barriers"
    )
    return result


def main() -> int:
    with local_stack() as (spark, address):
        r = run(spark, address)
    return 1 if r["consistent_bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
