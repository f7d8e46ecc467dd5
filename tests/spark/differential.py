"""Differential testing of views against Spark itself: a seeded workload generator over three
tables, a catalog of view queries covering every operator maintained incrementally, and a
checker that compares each view at every barrier with Spark's batch result of its query over the
sources at that barrier.

Used by tests/spark/test_incremental.py (a short run) and ``make differential`` (a long one:
``SNAPVIEW_DIFF_ROUNDS``, ``SNAPVIEW_DIFF_SEED``).
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal

SCHEMAS = {
    "customers": ("id BIGINT, region STRING, tier INT", ["id"]),
    "orders": (
        "id BIGINT, customer BIGINT, item STRING, qty INT, amount DECIMAL(10,2), price DOUBLE, "
        "note STRING, placed DATE, at TIMESTAMP, tag BINARY",
        ["id"],
    ),
    "shipments": ("id BIGINT, order_id BIGINT, carrier STRING, weight INT", ["id"]),
}


@dataclass(frozen=True)
class ViewCase:
    name: str
    query: str
    key: tuple[str, ...] | None  # None: a one-row view (global aggregate)
    covers: tuple[str, ...]  # the operators it exercises


CASES = [
    ViewCase(
        "v_filter",
        "SELECT id, customer, qty * 2 AS q2, amount, upper(item) AS item "
        "FROM orders WHERE qty > 3 OR note IS NULL",
        ("id",),
        ("filter", "projection"),
    ),
    ViewCase(
        "v_fk_join",
        "SELECT o.id, o.amount, c.region, c.tier FROM orders o JOIN customers c "
        "ON o.customer = c.id WHERE c.tier >= 1",
        ("id",),
        ("join on a primary key", "filter"),
    ),
    ViewCase(
        "v_nonkey_join",
        "SELECT s.id AS sid, o.id AS oid, s.carrier, o.qty, o.customer FROM shipments s "
        "JOIN orders o ON s.order_id = o.id",
        ("sid",),
        ("join on a non-key column", "join on a primary key"),
    ),
    ViewCase(
        "v_groups",
        "SELECT customer, COUNT(*) AS n, COUNT(qty) AS nq, SUM(qty) AS sq, SUM(amount) AS sa, "
        "AVG(amount) AS aa, AVG(qty) AS aq, SUM(price) AS sp FROM orders GROUP BY customer",
        ("customer",),
        ("group by", "count", "sum", "avg"),
    ),
    ViewCase(
        "v_global",
        "SELECT COUNT(*) AS n, SUM(amount) AS s, AVG(qty) AS a, COUNT(note) AS notes FROM orders",
        None,
        ("global aggregate",),
    ),
    ViewCase(
        "v_join_agg",
        "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s FROM orders o JOIN customers c "
        "ON o.customer = c.id GROUP BY c.region",
        ("region",),
        ("join", "group by"),
    ),
    ViewCase(
        "v_join_groups",
        "SELECT c.tier, COUNT(*) AS n, SUM(o.qty) AS sq, AVG(o.qty) AS aq FROM orders o "
        "JOIN customers c ON o.customer = c.id WHERE c.region <> 'north' GROUP BY c.tier",
        ("tier",),
        ("aggregate over a join, both over Arrow",),
    ),
    ViewCase(
        "v_three_way",
        "SELECT s.id, c.region, o.qty, s.weight FROM shipments s JOIN orders o ON s.order_id = "
        "o.id JOIN customers c ON o.customer = c.id WHERE s.weight > 1",
        ("id",),
        ("multi-way join",),
    ),
    ViewCase(
        "v_distinct",
        "SELECT DISTINCT customer, tier FROM orders o JOIN customers c ON o.customer = c.id",
        ("customer",),
        ("distinct",),
    ),
    ViewCase(
        "v_having",
        "SELECT customer, COUNT(*) AS n, SUM(qty) AS sq FROM orders GROUP BY customer "
        "HAVING COUNT(*) > 4",
        ("customer",),
        ("having: groups crossing the threshold both ways",),
    ),
    ViewCase(
        "v_left_join_agg",
        "SELECT c.id, c.region, COUNT(o.id) AS n, SUM(o.amount) AS s, MAX(o.qty) AS top "
        "FROM customers c LEFT JOIN orders o ON o.customer = c.id GROUP BY c.id, c.region",
        ("id",),
        ("left outer join", "aggregate over an outer join", "max"),
    ),
    ViewCase(
        "v_right_join",
        "SELECT o.id AS oid, c.id AS cid, c.region, o.qty FROM customers c "
        "RIGHT JOIN orders o ON o.customer = c.id",
        ("oid",),
        ("right outer join: a row whose only match goes and comes back",),
    ),
    ViewCase(
        "v_full_join",
        "SELECT COALESCE(s.id, -o.id) AS k, s.carrier, o.qty, o.id AS oid FROM shipments s "
        "FULL OUTER JOIN orders o ON s.order_id = o.id",
        ("k",),
        ("full outer join", "NULL join keys", "coalesce"),
    ),
    ViewCase(
        "v_minmax",
        "SELECT customer, MIN(qty) AS lo, MAX(qty) AS hi, MIN(item) AS first_item, "
        "MAX(amount) AS top, MIN(price) AS cheapest, COUNT(*) AS n FROM orders GROUP BY customer",
        ("customer",),
        ("min", "max", "NULLs in MIN/MAX", "deleting the current extreme"),
    ),
    ViewCase(
        "v_global_minmax",
        "SELECT MIN(amount) AS lo, MAX(price) AS hi, COUNT(DISTINCT customer) AS customers "
        "FROM orders",
        None,
        ("global min/max", "global count distinct"),
    ),
    ViewCase(
        "v_count_distinct",
        "SELECT customer, COUNT(DISTINCT item) AS items, COUNT(*) AS n, SUM(price) AS sp "
        "FROM orders GROUP BY customer",
        ("customer",),
        ("count distinct", "double sum"),
    ),
    ViewCase(
        "v_minmax_kept",
        "SELECT customer, MIN(qty) AS lo, MAX(qty) AS hi, MIN(item) AS first_item, "
        "MAX(item) AS last_item, COUNT(DISTINCT item) AS items, MAX(placed) AS last_day, "
        "COUNT(*) AS n, SUM(qty) AS sq, MIN(amount) AS low, MAX(amount) AS high, "
        "MAX(at) AS last_at FROM orders GROUP BY customer",
        ("customer",),
        (
            "min/max and count distinct on the columnar path (DECIMAL and TIMESTAMP too)",
            "deleting the current extreme",
        ),
    ),
    ViewCase(
        "v_sum_distinct",
        "SELECT region, SUM(DISTINCT tier) AS st, AVG(DISTINCT tier) AS at FROM customers "
        "GROUP BY region",
        ("region",),
        ("sum distinct", "avg distinct"),
    ),
    ViewCase(
        "v_union_all",
        "SELECT id, customer AS who, 'order' AS kind FROM orders WHERE qty > 5 "
        "UNION ALL SELECT id, order_id AS who, 'ship' AS kind FROM shipments WHERE weight > 2",
        ("id", "kind"),
        ("union all",),
    ),
    ViewCase(
        "v_self_join",
        "SELECT a.id, b.id AS other, a.customer FROM orders a JOIN orders b "
        "ON a.customer = b.customer AND a.item = b.item WHERE a.id < b.id",
        ("id", "other"),
        ("self-join",),
    ),
    ViewCase(
        "v_case_groups",
        "SELECT CASE WHEN qty IS NULL THEN 'none' WHEN qty > 5 THEN 'big' ELSE 'small' END "
        "AS size, COALESCE(note, 'plain') AS note, COUNT(*) AS n, "
        "SUM(CAST(amount AS DOUBLE)) AS s, AVG(price) AS ap FROM orders GROUP BY 1, 2",
        ("size", "note"),
        ("case and coalesce in group keys", "casts", "double avg"),
    ),
    ViewCase(
        "v_literals",
        "SELECT id, amount * 1.5 AS a15, 1 - amount / 1000 AS disc, amount - 0.01 AS less, "
        "date_add(placed, 30) AS due, placed - INTERVAL '1' MONTH AS month_before, "
        "at + INTERVAL '90' MINUTE AS later, at + INTERVAL '1-1' YEAR TO MONTH AS next_year, "
        "at + make_interval(0, 1, 0, 2, 3, 0, 0.5) AS odd, tag, "
        "CAST(NULL AS DECIMAL(38,10)) AS no_amount, CAST(NULL AS DATE) AS no_day, "
        "CAST(NULL AS TIMESTAMP) AS no_at, CAST(NULL AS BINARY) AS no_tag, "
        "CASE WHEN amount > 500 THEN 12345678901234567890.123456789 END AS huge "
        "FROM orders WHERE amount >= 10 AND placed >= DATE '2024-01-20' "
        "AND at < TIMESTAMP '2024-03-01 12:00:00' AND tag <> X'01' "
        "AND amount < 99999999999999999999999999999.99 AND price <> 1e300",
        ("id",),
        ("DECIMAL, DATE, TIMESTAMP, BINARY and INTERVAL literals", "NULL of each type"),
    ),
    ViewCase(
        "v_literal_groups",
        "SELECT customer, SUM(amount * (1 - 0.05)) AS net, COUNT(*) AS n, "
        "SUM(CASE WHEN placed < DATE '2024-02-01' THEN amount ELSE 0.00 END) AS early, "
        "MAX(at) AS last_at, MIN(tag) AS first_tag, MIN(placed) AS first_day "
        "FROM orders WHERE tag IS NULL OR tag <> X'00' GROUP BY customer",
        ("customer",),
        ("literals inside aggregates", "min/max of DATE, TIMESTAMP and BINARY"),
    ),
    ViewCase(
        "v_author_posts",
        "SELECT c.id, c.region, (SELECT COUNT(*) FROM orders o WHERE o.customer = c.id) AS n "
        "FROM customers c",
        ("id",),
        ("correlated scalar subquery",),
    ),
    ViewCase(
        "v_arith",
        "SELECT id, customer * 10 + qty AS code, -qty AS neg_qty, abs(qty - 5) AS off, "
        "amount * 2 AS twice, amount - 0.01 AS less, amount * qty AS line, "
        "CAST(qty AS DECIMAL(12,3)) AS qd, CAST(amount AS DECIMAL(9,1)) AS rounded, "
        "CASE WHEN qty > 5 THEN amount WHEN qty IS NULL THEN NULL ELSE 0.00 END AS big, "
        "IF(note IS NULL, customer, customer + 100) AS c2, COALESCE(qty, -1) AS q0, "
        "CAST(qty AS STRING) AS qs, price FROM orders "
        "WHERE amount * 2 > 100.00 OR qty + 1 >= 5 OR amount IS NULL",
        ("id",),
        ("integral and DECIMAL arithmetic over Arrow", "casts", "CASE, IF, COALESCE"),
    ),
    ViewCase(
        "v_decimal_sums",
        "SELECT customer, SUM(amount) AS s, AVG(amount) AS a, SUM(amount * qty) AS line, "
        "SUM(CASE WHEN qty > 5 THEN amount ELSE 0.00 END) AS big, SUM(qty + 1) AS q1, "
        "COUNT(amount) AS n FROM orders GROUP BY customer",
        ("customer",),
        ("DECIMAL SUM and AVG over Arrow", "sums of computed inputs"),
    ),
    ViewCase(
        "v_functions",
        "SELECT id, year(placed) AS y, month(placed) AS m, quarter(placed) AS q, "
        "dayofmonth(placed) AS d, dayofyear(placed) AS doy, "
        "datediff(placed, DATE '2024-01-15') AS since, substring(item, 2, 3) AS mid, "
        "substring(note, 0, 2) AS head, length(note) AS nl, item LIKE 'p%' AS p_item, "
        "note LIKE '%us%' AS n_us, item LIKE '%g' AS g_item, "
        "qty IN (0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13) AS long_in FROM orders "
        "WHERE year(placed) = 2024 AND month(placed) IN (1, 2) OR substring(item, 1, 1) = 'k'",
        ("id",),
        ("date parts, substring, length and LIKE over Arrow", "a long IN list (InSet)"),
    ),
    ViewCase(
        "v_function_groups",
        "SELECT COALESCE(month(placed), 0) AS m, substring(item, -2, 5) AS tail, "
        "COALESCE(CAST(placed AS STRING), 'none') AS day_text, "
        "COALESCE(dayofweek(placed), 0) AS dow, COALESCE(weekday(placed), -1) AS wd, "
        "COALESCE(extract(YEAR FROM at), 0) AS at_year, "
        "COALESCE(trim(concat('  ', item, '-', note, ' ')), '') AS joined, "
        "COALESCE(ltrim(concat(' ', note)), '') AS lt, rtrim(concat(item, '  ')) AS rt, "
        "COALESCE(note LIKE '%u_h', false) AS rushy, COUNT(*) AS n, SUM(qty) AS sq, "
        "SUM(datediff(placed, DATE '2024-01-01')) AS days, MAX(placed) AS last, "
        "SUM(hour(at)) AS hours, MAX(minute(at)) AS last_minute, MIN(second(at)) AS first_s, "
        "SUM(CAST(CAST(amount AS STRING) AS DECIMAL(12,3))) AS amount_by_text, "
        "MAX(CAST(CAST(placed AS STRING) AS DATE)) AS placed_by_text, "
        "SUM(CAST(concat(' ', CAST(qty AS STRING), '0 ') AS INT)) AS tenfold_qty "
        "FROM orders GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
        ("m", "tail", "day_text", "dow", "wd", "at_year", "joined", "lt", "rt", "rushy"),
        (
            "functions in group keys",
            "concat, trims, dayofweek, casts of dates to strings",
            "hour, minute and second of a TIMESTAMP",
            "casts from STRING to DECIMAL, DATE and INT, and of a DECIMAL to STRING",
        ),
    ),
]

# EXISTS, IN, NOT EXISTS and NOT IN as semi and anti joins (issue 27, item 2).
SUBQUERIES = [
    ViewCase(
        "v_exists",
        "SELECT c.id, c.region FROM customers c "
        "WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer = c.id AND o.qty > 3)",
        ("id",),
        ("EXISTS (semi join)",),
    ),
    ViewCase(
        "v_not_exists",
        "SELECT o.id, o.customer, o.qty FROM orders o WHERE NOT EXISTS "
        "(SELECT 1 FROM shipments s WHERE s.order_id = o.id AND s.weight > 1)",
        ("id",),
        ("NOT EXISTS (anti join)", "NULL-free keys on one side"),
    ),
    ViewCase(
        "v_in_subquery",
        "SELECT id, item, customer FROM orders "
        "WHERE customer IN (SELECT id FROM customers WHERE tier = 2)",
        ("id",),
        ("IN (subquery)", "a NULL left key never matches"),
    ),
    ViewCase(
        "v_not_in",
        "SELECT s.id, s.carrier FROM shipments s "
        "WHERE s.id NOT IN (SELECT o.id FROM orders o WHERE o.qty > 5)",
        ("id",),
        ("NOT IN over NOT NULL columns",),
    ),
    ViewCase(
        "v_exists_residual",
        "SELECT o.id, o.customer, o.item FROM orders o WHERE EXISTS (SELECT 1 FROM orders o2 "
        "WHERE o2.customer = o.customer AND o2.item <> o.item) AND NOT EXISTS (SELECT 1 FROM "
        "orders o3 WHERE o3.customer = o.customer AND o3.id <> o.id AND o3.qty > o.qty)",
        ("id",),
        ("correlated EXISTS and NOT EXISTS with a condition beyond the key (TPC-H q21)",),
    ),
    ViewCase(
        "v_not_exists_other",
        "SELECT o.id, o.customer, o.qty FROM orders o WHERE NOT EXISTS (SELECT 1 FROM orders o3 "
        "WHERE o3.customer = o.customer AND o3.qty <> o.qty AND o3.amount > 50)",
        ("id",),
        ("NOT EXISTS whose residual is one column <> another, counted per value (TPC-H q21's l3)",),
    ),
    ViewCase(
        "v_exists_groups",
        "SELECT c.region, COUNT(*) AS n, SUM(c.tier) AS st FROM customers c WHERE c.id IN "
        "(SELECT customer FROM orders WHERE item = 'fig') GROUP BY c.region",
        ("region",),
        ("an aggregate over a semi join",),
    ),
    ViewCase(
        "v_scalar_threshold",
        "SELECT id, customer, qty FROM orders WHERE qty > (SELECT AVG(tier) FROM customers) * 3",
        ("id",),
        ("uncorrelated scalar subquery: its value moves (a build) and stays (a delta)",),
    ),
    ViewCase(
        "v_scalar_having",
        "SELECT customer, SUM(qty) AS sq, COUNT(*) AS n FROM orders GROUP BY customer "
        "HAVING SUM(qty) > (SELECT MAX(tier) FROM customers) * 5",
        ("customer",),
        ("uncorrelated scalar subquery in HAVING (TPC-H q11)",),
    ),
    ViewCase(
        "v_scalar_max",
        "SELECT id, region, tier FROM customers "
        "WHERE tier = (SELECT MAX(tier) FROM customers WHERE region <> 'west')",
        ("id",),
        ("uncorrelated scalar subquery over the filtered table itself (TPC-H q15)",),
    ),
]

# ORDER BY ... LIMIT as a TopK (issue 27, item 4). Each ORDER BY ends in a unique column, so
# Spark's answer is the only one (ties at the boundary are the TPC-H suite's check_top_n's).
TOP_K = [
    ViewCase(
        "v_top_amounts",
        "SELECT id, customer, amount, note FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 5",
        ("id",),
        ("ORDER BY ... LIMIT", "DESC NULLS LAST", "the top row deleted"),
    ),
    ViewCase(
        "v_top_customers",
        "SELECT customer, SUM(qty) AS sq, COUNT(*) AS n, MAX(placed) AS last FROM orders "
        "GROUP BY customer ORDER BY sq DESC NULLS FIRST, customer LIMIT 4",
        ("customer",),
        ("TopK over an aggregate (TPC-H q3, q10, q18)", "NULLS FIRST"),
    ),
    ViewCase(
        "v_top_projected",
        "SELECT id, qty * 2 AS q2, upper(item) AS item FROM orders "
        "WHERE qty IS NOT NULL ORDER BY placed NULLS LAST, at, id LIMIT 7",
        ("id",),
        ("a projection above a TopK", "ORDER BY columns not in the output"),
    ),
]

# Literals of every type Spark produces, date/timestamp arithmetic (issue 24, item 6) and the
# function table (spark_sink.ivm.functions, issue 27).
LITERALS = [
    c
    for c in CASES
    if c.name in ("v_literals", "v_literal_groups", "v_functions", "v_function_groups")
]

# A view over a view (v_groups): built after it.
OVER_VIEW = ViewCase(
    "v_over_view",
    "SELECT n, COUNT(*) AS customers, SUM(sq) AS sq FROM v_groups GROUP BY n",
    ("n",),
    ("view over a view",),
)

CUSTOMERS = 12
REGIONS = ["north", "south", "east", "west"]  # a group key: never NULL (a view key cannot be)
ITEMS = ["apple", "pear", "fig", "kiwi"]
CARRIERS = ["ups", "dhl", None]


class Workload:
    """Seeded random changes: inserts, updates that move a row to another customer (join and
    group key) or change values, NULLs in non-key columns, deletes, and a key deleted and
    re-inserted within one round."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        # The date, timestamp and binary columns draw from their own generator, so the other
        # columns' sequence is the same as before they existed.
        self.rng_dt = random.Random(seed + 7919)
        self.orders: dict[int, dict] = {}
        self.shipments: dict[int, dict] = {}
        self.customers: dict[int, dict] = {}
        self.next_order = 1
        self.next_ship = 1

    def _order(self, oid: int) -> dict:
        r = self.rng
        return {
            "id": oid,
            "customer": r.randrange(CUSTOMERS + 2),  # a few with no customer row
            "item": r.choice(ITEMS),
            "qty": None if r.random() < 0.15 else r.randint(0, 9),
            "amount": None if r.random() < 0.1 else Decimal(r.randint(0, 99999)) / 100,
            "price": r.choice([0.5, 1.25, 2.0, 3.75, 10.0, 0.1, 0.7, 123456.789, 3.3e9]),
            "note": None if r.random() < 0.5 else r.choice(["gift", "rush"]),
            **self._dated(),
        }

    def _dated(self) -> dict:
        r = self.rng_dt
        day = dt.date(2024, 1, 1) + dt.timedelta(days=r.randrange(60))
        at = dt.datetime(2024, 1, 29, tzinfo=dt.UTC) + dt.timedelta(
            minutes=r.randrange(60 * 24 * 62), microseconds=r.randrange(1_000_000)
        )
        return {
            "placed": None if r.random() < 0.1 else day,
            "at": None if r.random() < 0.1 else at,
            "tag": None
            if r.random() < 0.1
            else bytes([r.randrange(4), r.randrange(256)][: r.randint(1, 2)]),
        }

    def _customer(self, cid: int) -> dict:
        return {"id": cid, "region": self.rng.choice(REGIONS), "tier": self.rng.randint(0, 2)}

    def initial(self) -> list[list[tuple]]:
        """Transactions (lists of (op, table, row)) that load the first state."""
        txns = [[("put", "customers", self._customer(c)) for c in range(CUSTOMERS)]]
        for c in range(CUSTOMERS):
            self.customers[c] = txns[0][c][2]
        orders = []
        for _ in range(60):
            o = self._order(self.next_order)
            self.next_order += 1
            self.orders[o["id"]] = o
            orders.append(("put", "orders", o))
        txns.append(orders)
        ships = []
        for _ in range(40):
            s = self._ship()
            ships.append(("put", "shipments", s))
        txns.append(ships)
        return txns

    def _ship(self) -> dict:
        r = self.rng
        sid = self.next_ship
        self.next_ship += 1
        s = {
            "id": sid,
            "order_id": (
                None
                if (x := r.random()) < 0.08
                else r.choice(list(self.orders) or [0])
                if x < 0.9
                else 10_000
            ),
            "carrier": r.choice(CARRIERS),
            "weight": r.randint(0, 5),
        }
        self.shipments[sid] = s
        return s

    def round(self) -> list[list[tuple]]:
        """One round of changes, as a few transactions."""
        r = self.rng
        txns: list[list[tuple]] = []
        for _ in range(r.randint(2, 4)):
            ops: list[tuple] = []
            for _ in range(r.randint(1, 6)):
                x = r.random()
                if x < 0.25 or not self.orders:
                    o = self._order(self.next_order)
                    self.next_order += 1
                    self.orders[o["id"]] = o
                    ops.append(("put", "orders", o))
                elif x < 0.5:
                    oid = r.choice(list(self.orders))
                    o = dict(self.orders[oid])
                    field = r.choice(["customer", "qty", "amount", "note", "price"])
                    fresh = self._order(oid)
                    o[field] = fresh[field]
                    if field == "amount":  # the other columns' generator is left as it was
                        o.update({k: fresh[k] for k in ("placed", "at", "tag")})
                    self.orders[oid] = o
                    ops.append(("put", "orders", o))
                elif x < 0.62:
                    oid = r.choice(list(self.orders))
                    del self.orders[oid]
                    ops.append(("delete", "orders", {"id": oid}))
                elif x < 0.75:
                    ops.append(("put", "shipments", self._ship()))
                elif x < 0.82 and self.shipments:
                    sid = r.choice(list(self.shipments))
                    s = dict(self.shipments[sid])
                    s["order_id"] = r.choice(list(self.orders) or [0])
                    self.shipments[sid] = s
                    ops.append(("put", "shipments", s))
                elif x < 0.88 and self.shipments:
                    sid = r.choice(list(self.shipments))
                    del self.shipments[sid]
                    ops.append(("delete", "shipments", {"id": sid}))
                elif x < 0.95:
                    cid = r.randrange(CUSTOMERS + 2)
                    c = self._customer(cid)
                    self.customers[cid] = c
                    ops.append(("put", "customers", c))
                elif self.customers:
                    cid = r.choice(list(self.customers))
                    del self.customers[cid]
                    ops.append(("delete", "customers", {"id": cid}))
            txns.append(ops)
        if self.orders and r.random() < 0.5:
            # a customer's current minimum qty deleted
            cid = r.choice([o["customer"] for o in self.orders.values()])
            mine = [
                o for o in self.orders.values() if o["customer"] == cid and o["qty"] is not None
            ]
            if mine:
                low = min(mine, key=lambda o: o["qty"])
                del self.orders[low["id"]]
                txns.append([("delete", "orders", {"id": low["id"]})])
        if self.customers and r.random() < 0.4:
            # a customer (the only match of its orders) deleted and back within the round
            cid = r.choice(list(self.customers))
            txns.append([("delete", "customers", {"id": cid})])
            c = self._customer(cid)
            self.customers[cid] = c
            txns.append([("put", "customers", c)])
        if self.orders and r.random() < 0.5:
            # deleted and re-inserted (changed) within the round
            oid = r.choice(list(self.orders))
            txns.append([("delete", "orders", {"id": oid})])
            o = self._order(oid)
            self.orders[oid] = o
            txns.append([("put", "orders", o)])
        return txns


def apply(client, txns: list[list[tuple]]) -> None:
    for ops in txns:
        with client.transaction() as t:
            for op, table, row in ops:
                if op == "put":
                    t.put(table, row)
                else:
                    t.delete(table, row)


def _norm(v):
    if isinstance(v, dt.datetime):  # Spark's collect() gives naive local time, the store UTC
        return ("t", v.astimezone(dt.UTC))
    if isinstance(v, float):
        return ("f", round(v, 6) if math.isfinite(v) else v)
    if isinstance(v, Decimal):
        return ("d", v.normalize() if v == v else v)
    return v


def canonical(rows: list[dict]) -> Counter:
    """Rows as a multiset, DOUBLE rounded to 6 decimals (sums of doubles maintained by adding
    and subtracting differ from a batch sum in the last bits; docs/design.md §6.4)."""
    return Counter(tuple(sorted((k, _norm(v)) for k, v in r.items())) for r in rows)


# DOUBLE: a maintained SUM is the exact sum of the current inputs rounded once (design.md
# §6.4); Spark's batch sum is within (n - 1) ulps of the largest partial sum of it. Both are
# far inside this relative bound for the workload's sizes; a running sum that drifted (a value
# added and subtracted back, leaving its rounding error) is far outside it.
DOUBLE_REL = 1e-9


def close_enough(got: Counter, want: Counter) -> bool:
    """The two multisets are equal up to DOUBLE_REL in their DOUBLE columns."""

    def split(c: Counter) -> dict:
        out: dict = {}
        for row, n in c.items():
            exact = tuple((k, v) for k, v in row if not (isinstance(v, tuple) and v[0] == "f"))
            floats = tuple(v[1] for _, v in row if isinstance(v, tuple) and v[0] == "f")
            out.setdefault(exact, []).extend([floats] * n)
        return out

    a, b = split(got), split(want)
    if a.keys() != b.keys():
        return False
    for k, xs in a.items():
        ys = b[k]
        if len(xs) != len(ys):
            return False
        for x, y in zip(sorted(xs), sorted(ys), strict=True):
            for u, v in zip(x, y, strict=True):
                if not (u == v or math.isclose(u, v, rel_tol=DOUBLE_REL, abs_tol=DOUBLE_REL)):
                    return False
    return True


class SparkBatch:
    """Runs a query in Spark batch over sources given as Arrow (local relations: the same rows
    as a scan of the store, without a scan task per source), in a session of its own."""

    def __init__(self, spark, broadcast: bool = True) -> None:
        self.s = spark.newSession()
        self.s.conf.set("spark.sql.session.timeZone", "UTC")
        self.s.conf.set("spark.sql.shuffle.partitions", "2")
        if not broadcast:
            # Large local relations (TPC-H's lineitem): a broadcast of one can exhaust the
            # driver's memory; sort-merge joins stream instead.
            self.s.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        self._bound: dict[str, tuple] = {}

    def bind(self, client, snap, sources) -> None:
        """Make each of ``sources`` the temp view of its rows as ``snap`` reads them (once per
        read ts)."""
        for table in sources:
            ts = snap.read_ts(table)
            if self._bound.get(table) != ("ts", ts):
                self._bind(client, table, snap.read(table), ("ts", ts))

    def _bind(self, client, table: str, rows, key: tuple) -> None:
        from spark_source.spark_types import table_struct

        info = client.describe_table(table)
        self.s.createDataFrame(rows, schema=table_struct(info)).createOrReplaceTempView(table)
        self._bound[table] = key

    def result(self, client, query: str, snap, sources) -> list[dict]:
        self.bind(client, snap, sources)
        return [r.asDict() for r in self.s.sql(query).collect()]

    def result_over(self, client, query: str, rows: dict) -> list[dict]:
        """``query`` over ``rows`` ({table: (fingerprint, Arrow table)}); a table whose
        fingerprint is bound already is not sent to Spark again."""
        for table, (fp, t) in rows.items():
            if self._bound.get(table) != ("fp", fp):
                self._bind(client, table, t, ("fp", fp))
        return [r.asDict() for r in self.s.sql(query).collect()]


def fingerprint(t) -> bytes:
    """A digest of an Arrow table's contents (its IPC stream, chunks combined). Reads come in
    primary-key order, so equal contents give equal digests; were two equal tables ever to
    differ in layout, the only cost is one more Spark run."""
    import hashlib

    import pyarrow as pa

    sink = pa.BufferOutputStream()
    t = t.combine_chunks()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=16).digest()


def check_view(batch: SparkBatch, client, case: ViewCase, sources, barriers) -> int:
    """Compare ``case``'s view with Spark's result at every barrier in ``barriers``; returns
    how many were compared. Raises AssertionError naming the view, the barrier and the rows
    that differ.

    Spark runs once per distinct contents of the sources (their fingerprints as read at the
    barrier), not once per barrier: a root table's read ts is the barrier itself, and most
    barriers of a run change nothing the view reads. The view is still read and compared at
    every barrier."""
    cache: dict[tuple, Counter] = {}
    n = 0
    for b in barriers:
        snap = client.snapshot([*sources, case.name], barrier=b)
        rows = {t: snap.read(t) for t in sources}
        fps = {t: fingerprint(r) for t, r in rows.items()}
        key = tuple(sorted(fps.items()))
        if key not in cache:
            over = {t: (fps[t], rows[t]) for t in sources}
            cache[key] = canonical(batch.result_over(client, case.query, over))
        got_rows = snap.read(case.name).to_pylist()
        got = canonical(got_rows)
        want = cache[key]
        if got != want and not close_enough(got, want):
            raise AssertionError(
                f"view {case.name} at barrier {b}: missing {list((want - got).elements())[:5]}, "
                f"extra {list((got - want).elements())[:5]}"
            )
        n += 1
    return n
