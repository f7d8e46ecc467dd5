"""Heavy calls take turns (kvstore.heavy_calls): at most one computes a chunk at a time, and the
turns are first come first served, so a call that just ended its turn and asks again waits
behind those already waiting. Threads here stand in for the server's request threads."""

from __future__ import annotations

import threading

from kvstore.heavy_calls import HeavyCalls
from tests.conftest import wait_for


def test_one_computes_at_a_time_and_every_call_gets_its_chunks():
    heavy = HeavyCalls(limit=4)
    inside = 0
    most = 0
    mu = threading.Lock()
    got: dict[int, list[int]] = {}

    def chunks(n: int):
        nonlocal inside, most
        for i in range(50):
            with mu:
                inside += 1
                most = max(most, inside)
            sum(range(2_000))  # some work inside the turn
            with mu:
                inside -= 1
            yield n * 100 + i

    def call(n: int) -> None:
        got[n] = list(heavy.in_turns(chunks(n)))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most == 1
    assert got == {n: [n * 100 + i for i in range(50)] for n in range(4)}


def test_turns_are_first_come_first_served():
    """A holder that ends its turn and asks again queues behind a waiter that asked first (a
    plain lock lets the releasing thread take it straight back)."""
    heavy = HeavyCalls(limit=2)
    order: list[str] = []
    first_in = threading.Event()
    release_first = threading.Event()

    def hog():
        def items():
            order.append("hog 1")
            first_in.set()
            release_first.wait(10)
            yield 1
            order.append("hog 2")
            yield 2

        list(heavy.in_turns(items()))

    def waiter():
        def items():
            order.append("waiter")
            yield 1

        list(heavy.in_turns(items()))

    a = threading.Thread(target=hog)
    a.start()
    assert first_in.wait(10)
    b = threading.Thread(target=waiter)
    b.start()
    wait_for(lambda: heavy._turns._issued == 2, 10, "the waiter to queue")
    release_first.set()
    a.join(10)
    b.join(10)
    assert order == ["hog 1", "waiter", "hog 2"]


def test_an_error_in_a_chunk_ends_the_turn():
    heavy = HeavyCalls(limit=2)

    def broken():
        yield 1
        raise ValueError("planted")

    got = []
    try:
        for x in heavy.in_turns(broken()):
            got.append(x)
    except ValueError:
        pass
    assert got == [1]
    assert list(heavy.in_turns(iter([7]))) == [7]  # the turn was handed on
