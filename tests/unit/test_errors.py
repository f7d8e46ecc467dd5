"""Errors cross the wire by an explicit registry: a client rebuilds only registered classes."""

from __future__ import annotations

import grpc
import pytest

import coordinator
import coordinator.errors
import kvstore.errors as kv_errors
from kvstore.grpc_errors import ERROR_CLASS_KEY
from kvstore.remote import translate_rpc_error


class _FailedCall(grpc.RpcError):
    """A failed call as the client sees it: a status code, details and the class trailer."""

    def __init__(self, code: grpc.StatusCode, details: str, class_name: str):
        self._code, self._details, self._class = code, details, class_name

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return ((ERROR_CLASS_KEY, self._class),)


def _request_errors(module) -> list[type]:
    return [
        v
        for v in vars(module).values()
        if isinstance(v, type)
        and issubclass(v, kv_errors.RequestError)
        and v is not kv_errors.RequestError
        and v.__module__ == module.__name__
    ]


@pytest.mark.parametrize("module", [kv_errors, coordinator.errors])
def test_every_request_error_is_registered(module):
    classes = _request_errors(module)
    assert classes, f"{module.__name__} defines no request errors"
    for cls in classes:
        assert kv_errors.error_class(cls.__name__) is cls, cls


def test_a_coordinator_error_is_rebuilt_as_its_own_class():
    e = translate_rpc_error(
        _FailedCall(
            grpc.StatusCode.ALREADY_EXISTS, "table 'v' is written by job 'a'", "SecondWriter"
        )
    )
    assert type(e) is coordinator.SecondWriter and "job 'a'" in str(e)


def test_an_unregistered_name_falls_back_to_the_status_code_class():
    """A trailer naming a class nobody registered (or a module attribute that is no error) is
    never looked up by name: the status code decides."""
    for name in ("Exception", "register_error", "RequestError", "NoSuchError"):
        e = translate_rpc_error(_FailedCall(grpc.StatusCode.NOT_FOUND, "gone", name))
        assert type(e) is kv_errors.NotFound, name


def test_a_class_with_another_status_code_is_not_rebuilt():
    e = translate_rpc_error(_FailedCall(grpc.StatusCode.NOT_FOUND, "x", "SecondWriter"))
    assert type(e) is kv_errors.NotFound


def test_a_name_registers_once():
    class SecondWriter(kv_errors.AlreadyExists):  # same name, another class
        pass

    with pytest.raises(ValueError, match="registered twice"):
        kv_errors.register_error(SecondWriter)
    with pytest.raises(TypeError):
        kv_errors.register_error(ValueError)  # type: ignore[arg-type]


def test_messages_cut_long_values():
    """cut() keeps a message short and says how long the value was; status_message caps any
    message a server sends."""
    from kvstore.errors import MAX_MESSAGE_CHARS, cut, status_message

    assert cut("orders") == "'orders'"
    long = cut("x" * 10_000)
    assert len(long) < 120 and "(10000 characters)" in long
    assert status_message("short") == "short"
    capped = status_message("y" * 100_000)
    assert len(capped) < MAX_MESSAGE_CHARS + 50 and "more characters" in capped
