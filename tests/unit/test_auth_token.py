"""The server's token check: exact match only, compared in constant time."""

from __future__ import annotations

import hmac

from coordinator.server import serve


def test_token_check_accepts_only_the_exact_bearer_token():
    ic = serve._TokenInterceptor("s3cret")
    assert ic.authorized((("authorization", "Bearer s3cret"),))
    assert ic.authorized((("x-other", "1"), ("authorization", b"Bearer s3cret")))
    for md in [
        (),
        None,
        (("authorization", "Bearer s3cre"),),
        (("authorization", "Bearer s3cret "),),
        (("authorization", "Bearer S3CRET"),),
        (("authorization", "s3cret"),),
        (("authorization", "Bearer s3cret\u00e9"),),  # not ASCII: no TypeError, just no
        (("x-authorization", "Bearer s3cret"),),
    ]:
        assert not ic.authorized(md), md


def test_token_is_compared_with_compare_digest(monkeypatch):
    """A plain == leaks through its timing how much of a guess was right."""
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(serve.hmac, "compare_digest", spy)
    ic = serve._TokenInterceptor("s3cret")
    assert ic.authorized((("authorization", "Bearer s3cret"),))
    assert not ic.authorized((("authorization", "Bearer nope"),))
    assert calls == [(b"Bearer s3cret", b"Bearer s3cret"), (b"Bearer nope", b"Bearer s3cret")]
