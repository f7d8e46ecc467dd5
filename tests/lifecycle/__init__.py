"""The lifecycle walk (issue 24): a seeded, model-based random walk over what users do, against a
real ``snapview serve`` and a real SparkSession, checked against a plain Python model after every
step (docs/design.md section 9).

    model.py       what the user did: tables and their versions, views, the stream, leases
    ops.py         the ops as data, how the next one is picked, how each runs
    invariants.py  what must hold after every step
    walk.py        the walk, the deadlines, KNOWN_OPEN, the report and replay file
    shrink.py      delta debugging of a failing sequence
    world.py       the server, its long-lived clients, the Spark session

Every item of issue 24 is a step (or a situation, a tag of ``ops.tags``) the walk can take:

    op / tag                                      item
    fork                                          1  fork after connecting; children commit
    churn (put then delete) + restart + check     2  a legal LMDB file passes the start-up check
    churn on a 1 MiB map, snapshots, barriers     3  the map grows; no call hangs (deadline)
    drop cascade + view_build (recreate_view)     4  a recreated view starts clean
    load twice (repeat_load)                      5  every one-off load writes
    view_build / view_step of v_dec               6  a DECIMAL literal in an incremental view
    a client used before a recreate (stale_client) 7 a long-lived client survives a recreate
    stream_stop, then the gc_hold invariant       8  a stopped stream stops holding GC (the walk
                                                     stops between batches; a mid-batch stop is
                                                     not generated yet)
    drop under a running view (drop_running_view) 9  no orphaned records; check stays clean
    batch_write                                   10 df.write.format("snapview").save()
    view_kill, view_start                         11 a killed job restarts and resumes
    view_build of an existing view                12 a rebuilt script re-attaches, view right
    cli_pipe                                      13 `snapview tables | true`: no pipe error
    stream_start (fresh_checkpoint), restart,     -- the rest of the lived path: streams with
    note_barrier + revise, lease_take/release,       and without checkpoints, kill -9, revisions,
    gc_wait, view_stop, view_wait, txn, create       leases and the GC safepoint
"""
