"""gRPC plumbing shared by snapview's services: status codes for our errors, and handlers that
decode requests themselves so that garbage bytes get INVALID_ARGUMENT, never UNKNOWN."""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from kvstore.errors import (
    InvalidArgument,
    RequestError,
    SnapviewError,
    TxnError,
    status_message,
)

log = logging.getLogger("snapview.rpc")
ERROR_CLASS_KEY = "snapview-error-class"


def status_code_of(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, RequestError | TxnError | SnapviewError):
        return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL)
    return grpc.StatusCode.INTERNAL


def abort_with(context: grpc.ServicerContext, method: str, exc: BaseException) -> None:
    """End the call with the status code for ``exc`` (INTERNAL for a bug, never UNKNOWN)."""
    if not isinstance(exc, SnapviewError):
        log.exception("internal error in %s", method)
        context.abort(
            grpc.StatusCode.INTERNAL,
            status_message(f"{method}: internal error: {type(exc).__name__}: {exc}"),
        )
    # The class name rides along so a Python client can raise the very same exception type.
    context.set_trailing_metadata(((ERROR_CLASS_KEY, type(exc).__name__),))
    context.abort(status_code_of(exc), status_message(str(exc)))


def generic_handler(
    service: str, descriptor: ServiceDescriptor, impl: object
) -> grpc.GenericRpcHandler:
    """Serve every method of ``descriptor`` (a protobuf ServiceDescriptor) with the same-named
    method of ``impl``. Requests arrive as raw bytes and are parsed here, so a malformed request
    is answered INVALID_ARGUMENT naming the method instead of a framework INTERNAL."""
    handlers = {}
    for m in descriptor.methods:
        fn = getattr(impl, m.name)
        req_cls = _message_class(m.input_type)
        if m.client_streaming and m.server_streaming:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                _wrap_bidi(m.full_name, fn, req_cls),
                response_serializer=lambda r: r.SerializeToString(),
            )
        elif m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                _wrap_stream(m.full_name, fn, req_cls),
                response_serializer=lambda r: r.SerializeToString(),
            )
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                _wrap_unary(m.full_name, fn, req_cls),
                response_serializer=lambda r: r.SerializeToString(),
            )
    return grpc.method_handlers_generic_handler(service, handlers)


def _message_class(desc):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(desc)


def _parse(method: str, req_cls, raw: bytes):
    try:
        return req_cls.FromString(raw)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise InvalidArgument(
            f"{method}: request is not a valid {req_cls.DESCRIPTOR.name}: {e}"
        ) from None


def _wrap_unary(method: str, fn: Callable, req_cls):
    def handler(raw, context):
        try:
            return fn(_parse(method, req_cls, raw), context)
        except Exception as e:  # noqa: BLE001 - every failure gets a definite status
            abort_with(context, method, e)

    return handler


def _wrap_bidi(method: str, fn: Callable, req_cls):
    def handler(raw_iter, context):
        requests = (_parse(method, req_cls, raw) for raw in raw_iter)
        try:
            yield from fn(requests, context)
        except grpc.RpcError:
            # The client went away (cancelled its stream, or its process died): nobody to answer.
            return
        except Exception as e:  # noqa: BLE001
            abort_with(context, method, e)

    return handler


def _wrap_stream(method: str, fn: Callable, req_cls):
    def handler(raw, context):
        try:
            yield from fn(_parse(method, req_cls, raw), context)
        except Exception as e:  # noqa: BLE001
            abort_with(context, method, e)

    return handler
