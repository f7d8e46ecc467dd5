"""TiFlink's example: each author with the number of their posts, kept as a consistent view.

    .venv/bin/python scripts/examples/author_posts.py

The query has a correlated subquery; Spark rewrites it into an aggregate of posts LEFT OUTER
joined to authors, which snapview maintains incrementally (``explain()`` shows the delta plan).
Posts keep arriving while the view is read; every read of the view at a barrier matches the posts
table at the same barrier.
"""

from __future__ import annotations

import random
import sys

try:
    from scripts.examples.common import local_stack
except ImportError:  # run as a script
    from common import local_stack

QUERY = (
    "select id, first_name, last_name, email, "
    "(select count(*) from posts where author_id = authors.id) as posts from authors"
)
AUTHORS = 20


def run(spark, address: str, rounds: int = 5, out=print) -> list[str]:
    """Create the tables, start the view, add posts; returns the mismatches found (none)."""
    import coordinator
    from spark_sink import MaterializedView

    c = coordinator.connect(address)
    c.create_table(
        "authors",
        "id BIGINT, first_name STRING, last_name STRING, email STRING",
        primary_key=["id"],
    )
    c.create_table("posts", "id BIGINT, author_id BIGINT, title STRING", primary_key=["id"])
    with c.transaction() as t:
        for i in range(AUTHORS):
            t.put(
                "authors",
                {"id": i, "first_name": f"First{i}", "last_name": f"Last{i}", "email": f"a{i}@x"},
            )
    view = (
        MaterializedView.builder(spark)
        .coordinator(address)
        .query(QUERY)
        .target("author_posts")
        .primary_key("id")
        .trigger_interval("200 milliseconds")
        .build()
    )
    out(view.explain())
    job = view.start()
    rng, next_post, bad = random.Random(1), 0, []
    try:
        for r in range(rounds):
            with c.transaction() as t:
                for _ in range(rng.randint(1, 10)):
                    t.put(
                        "posts",
                        {"id": next_post, "author_id": rng.randrange(AUTHORS), "title": f"p{r}"},
                    )
                    next_post += 1
            job.await_barrier(t.commit_ts, timeout=120)
            snap = c.snapshot(["posts", "author_posts"])
            counts = {}
            for p in snap.read("posts").to_pylist():
                counts[p["author_id"]] = counts.get(p["author_id"], 0) + 1
            rows = snap.read("author_posts").to_pylist()
            for row in rows:
                if row["posts"] != counts.get(row["id"], 0):
                    bad.append(f"barrier {snap.barrier}: author {row['id']} {row['posts']}")
            top = sorted(rows, key=lambda x: -x["posts"])[:3]
            out(
                f"barrier {snap.barrier}: {next_post} posts; top authors "
                + ", ".join(f"{x['first_name']} {x['last_name']}={x['posts']}" for x in top)
            )
    finally:
        job.stop()
        c.close()
    out(f"author_posts: {len(bad)} mismatches against posts at the same barrier")
    return bad


def main() -> int:
    with local_stack() as (spark, address):
        return 1 if run(spark, address) else 0


if __name__ == "__main__":
    sys.exit(main())
